"""Selected Python statements → a Region: what a fused kernel would take, give back and need (``python_region``),
or why the selection cannot be fused."""
