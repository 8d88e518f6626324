"""Reference texts shipped with the package: what the LLM Coder sends the model."""

from __future__ import annotations

from functools import cache
from importlib import resources


@cache
def cuda_guide() -> str:
    return resources.files(__package__).joinpath("cuda_guide.md").read_text(encoding="utf-8")


@cache
def coder_rules() -> str:
    """The Coder's role, reply format (with an example binding) and rules: the system prompt's first block."""
    return resources.files(__package__).joinpath("coder_rules.md").read_text(encoding="utf-8")
