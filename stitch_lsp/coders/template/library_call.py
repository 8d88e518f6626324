"""How a library group is lowered: the GEMM / convolution / pooling / attention call the program makes.

The one seam between the template Coder's own kernels and the libraries. A library group
(one op a library runs, with the getitems that take its tuple apart) becomes PyTorch calls
of the traced aten ops, so cuBLAS / cuDNN / PyTorch's pooling kernels run exactly what the
reference ran (TF32 as the reference had it); what follows the call is fused into the next
kernel, which reads the library's output once. A GEMM's bias + ReLU / tanh-GELU goes into
cuBLASLt's epilogue before this point (``library_epilogue``). A family of our own GEMM or
convolution kernels replaces the call here: ``LOWERINGS`` maps a library kind to a function
that returns the step (a kernel launch, or None to keep the library call).
"""

from __future__ import annotations

from typing import Callable

from stitch_lsp.coders import ATTENTION_LIBRARY as LIBRARY
from stitch_lsp.plan import library_calls
from stitch_lsp.plan.attention import PROBS, SDPA
from stitch_lsp.plan.fusion import Group
from stitch_lsp.op_graph import OpGraph, OpNode

def _gemm_family(group: Group, index: dict[str, OpNode], graph: OpGraph):
    """The GEMM family's kernel (Triton, with its fused epilogue) for the GEMMs it took
    (``gemm_match.fuse_gemms`` made them ``stitch.gemm`` nodes); the others stay cuBLAS calls."""
    from stitch_lsp.plan.gemm_spec import GEMM_OP
    from stitch_lsp.coders.template.gemm_triton import gemm_kernel

    node = library_op(group, index)
    return gemm_kernel(node) if node.op == GEMM_OP else None


def _attention(group: Group, index: dict[str, OpNode], graph: OpGraph, written: frozenset[str] = frozenset()):
    """The attention kernel of our own (``attention.kernel``) where it takes the call; else PyTorch's.
    ``written``: attention nodes folded from hand-written code, whose NaN / Inf the kernel keeps."""
    from stitch_lsp.coders.template.attention.kernel import attention_kernel
    from stitch_lsp.coders.template.attention.probs_kernel import probs_kernel
    from stitch_lsp.coders.template.emitter import Unsupported

    node = library_op(group, index)
    if node.op == PROBS:  # folded only where the kernel takes it (``lower``): no library call stands for it
        return probs_kernel(node, index, f"stitch_attention_probs_{node.name}", graph)
    if node.op != SDPA:
        return None
    try:
        return attention_kernel(node, index, f"stitch_attention_{node.name}", graph, written=node.name in written)
    except Unsupported:
        return None


# kind ("gemm" | "conv" | "pool" | "attention" | "random") -> lowering(group, index, graph) -> a KernelSpec or None.
# Attention is lowered apart (``lower_library``): it also needs the program's attention option.
LOWERINGS: dict[str, Callable[[Group, dict[str, OpNode], OpGraph], object]] = {"gemm": _gemm_family}


def library_op(group: Group, index: dict[str, OpNode]) -> OpNode:
    """The group's library node (the others are getitems of its tuple)."""
    return next(index[n] for n in group.nodes if library_calls.library_kind(index[n].op))


def describe(group: Group, index: dict[str, OpNode], graph: OpGraph) -> str:
    """What runs the group, for the plan and the notes: "cuDNN (convolution)", "cuBLAS (TF32 as the reference)"."""
    node = library_op(group, index)
    kind = library_calls.library_kind(node.op)
    text = f"{library_calls.RUNNER[kind]} through torch ({node.op.split('.')[1]})"
    if kind == "gemm" and graph.allow_tf32:
        text += ", TF32 allowed as in the reference"
    return text


def lower_library(group: Group, index: dict[str, OpNode], graph: OpGraph, attention: bool | str = True,
                  written_attention: frozenset[str] = frozenset()):
    """A kernel of our own for the group where a registered lowering writes one; None keeps the library call
    (always for attention when ``attention`` is ``LIBRARY``)."""
    kind = library_calls.library_kind(library_op(group, index).op)
    if kind == "attention":
        return None if attention == LIBRARY else _attention(group, index, graph, written_attention)
    lowering = LOWERINGS.get(kind or "")
    return lowering(group, index, graph) if lowering is not None else None
