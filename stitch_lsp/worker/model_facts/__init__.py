"""What tracing learns about a model beyond its graph: the values of its mask buffers, and state it keeps
across calls outside its parameters and buffers."""
