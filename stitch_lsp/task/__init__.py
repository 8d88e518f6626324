"""Selection → shapes → Task: the region a user selected, where its shapes come from, and the KernelBench-format
task built from them."""
