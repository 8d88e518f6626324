"""Attention as a kernel of our own (``kernel.py``), reading q, k and v where their views put them
(``view_layout.py``)."""
