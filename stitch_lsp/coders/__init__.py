"""The Coder seam: whatever writes a Candidate for a Task and its Plan.

The built-in ``template`` Coder needs nothing but the Plan's traced graph. The
``llm`` Coder (``stitch_lsp.coders.llm.coder``) plugs in here; ``auto`` tries
the template first and hands what it leaves uncovered to the LLM Coder when one
is available.
"""

from __future__ import annotations

import importlib
from typing import Protocol

from stitch_lsp.pipeline import Candidate, Plan, Task
from stitch_lsp.settings import Settings


class Coder(Protocol):
    name: str

    def generate(self, task: Task, plan: Plan, feedback: str | None = None) -> Candidate: ...


class CoderUnavailable(Exception):
    """The asked-for Coder cannot run here (not installed, no API key, ...): the message says why."""


def make_coder(name: str, settings: Settings) -> Coder:
    if name == "template":
        from stitch_lsp.coders.template import TemplateCoder

        return TemplateCoder()
    if name in ("llm", "auto"):
        try:
            module = importlib.import_module("stitch_lsp.coders.llm.coder")
        except ModuleNotFoundError as exc:
            if name == "auto":
                return make_coder("template", settings)
            raise CoderUnavailable(f"the LLM Coder is not available: {exc}") from exc
        factory = getattr(module, "make_coder", None)
        if factory is None:
            if name == "auto":
                return make_coder("template", settings)
            raise CoderUnavailable("stitch_lsp.coders.llm.coder has no make_coder(name, settings)")
        return factory(name, settings)
    raise CoderUnavailable(f"unknown coder {name!r}: use template, llm or auto")
