"""Stitch: verified, profiled CUDA kernels from PyTorch code, in the editor."""

__version__ = "0.1.0"

from stitch_lsp import moved as _moved

_moved.install()
