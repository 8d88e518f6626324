"""Reference texts shipped with the package (the CUDA skills guide the LLM Coder sends)."""

from __future__ import annotations

from functools import cache
from importlib import resources


@cache
def cuda_guide() -> str:
    return resources.files(__package__).joinpath("cuda_guide.md").read_text(encoding="utf-8")
