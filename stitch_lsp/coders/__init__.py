"""The Coder seam: whatever writes a Candidate for a Task and its Plan.

The built-in ``template`` Coder needs nothing but the Plan's traced graph. The
``llm`` Coder (``stitch_lsp.coders.llm``) plugs in here; ``auto`` tries
the template first and hands what it leaves uncovered to the LLM Coder when one
is available.

Stages outside ``coders/`` use only this module: the Protocol, ``make_coder``,
and the few questions only the template Coder can answer (how a convolution's
output is laid out, which GEMM kernels a tuning run would time, the module an
accepted edit writes). Each imports the Coder it needs when it is called.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from stitch_lsp.coders.errors import CoderError, CoderUnavailable
from stitch_lsp.pipeline import Candidate, Plan, Task
from stitch_lsp.settings import Settings

if TYPE_CHECKING:
    from stitch_lsp.contract.gemm_tune import TuneCase
    from stitch_lsp.op_graph import OpGraph, OpNode
    from stitch_lsp.plan.conv_layout import ConvLayout
    from stitch_lsp.plan.fusion import Group
    from stitch_lsp.plan.gemm_tiles import GemmOptions

# The template Coder's ``attention`` option for a candidate whose attention calls stay PyTorch's fused attention
# (the kernel of our own was refused or slower): beside True (attention kernels of our own) and False
# (hand-written attention lowered as written).
ATTENTION_LIBRARY = "library"


class Coder(Protocol):
    name: str

    def generate(self, task: Task, plan: Plan, feedback: str | None = None) -> Candidate: ...


def make_coder(name: str, settings: Settings) -> Coder:
    if name == "template":
        from stitch_lsp.coders.template import TemplateCoder

        return TemplateCoder()
    if name in ("llm", "auto"):
        try:  # the LLM Coder needs the anthropic client; the template Coder does not
            from stitch_lsp.coders.llm.auto import make_coder as make_llm_coder
        except ModuleNotFoundError as exc:
            if name == "auto":
                return make_coder("template", settings)
            raise CoderUnavailable(f"the LLM Coder is not available: {exc}") from exc
        return make_llm_coder(name, settings)
    raise CoderUnavailable(f"unknown coder {name!r}: use template, llm or auto")


def conv_layouts(graph: "OpGraph", groups: "list[Group]", index: "dict[str, OpNode]",
                 channels_last: bool | None = None) -> "dict[str, ConvLayout]":
    """Each convolution's layout as the template Coder would write it (the Planner notes it)."""
    from stitch_lsp.coders.template.conv_chain import chained_layouts

    return chained_layouts(graph, groups, index, channels_last)


def attention_probs(node: "OpNode", graph: "OpGraph") -> bool:
    """Whether the template Coder writes this attention-probabilities node as its kernel (the Planner folds it)."""
    from stitch_lsp.coders.template.attention.probs_kernel import takes

    return takes(node, graph)


def gemm_tune_cases(graph: "OpGraph", gemm: "GemmOptions") -> "list[TuneCase]":
    """What a tuning run times: the template Coder's GEMM-family kernels of ``graph`` whose tile is not
    measured yet, each with every candidate tile."""
    from stitch_lsp.coders.template.gemm_tune import tune_cases, untuned_specs

    specs = untuned_specs(graph, gemm)
    return tune_cases(specs, gemm.gpu) if specs else []


def workspace_module(graph: "OpGraph", gemm: "GemmOptions | None", channels_last: bool | None, *,
                     loader_import: str, func_name: str, header: str, attention: bool | str = True) -> str:
    """The module an accepted edit writes into the workspace: the template Coder's kernels for ``graph``
    (generated as the candidate was, with ``gemm``, ``channels_last`` and ``attention``) and the fused function."""
    from stitch_lsp.coders.template import edit_module, lower

    program = lower(graph, gemm, channels_last=channels_last, attention=attention)
    return edit_module(program, loader_import=loader_import, func_name=func_name, header=header)


__all__ = ["ATTENTION_LIBRARY", "attention_probs", "Coder", "CoderError", "CoderUnavailable", "make_coder", "conv_layouts",
           "gemm_tune_cases", "workspace_module"]
