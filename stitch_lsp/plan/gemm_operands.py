"""Which ``mm`` / ``addmm`` nodes the GEMM family takes, and where their operands are stored.

A GEMM qualifies when its operands are 2-D tensors of its own dtype and every size is at least a
tensor-core tile; an operand that is a transpose of a stored matrix is read in place, transposed.
"""

from __future__ import annotations

from typing import Any

from attrs import define, field

from stitch_lsp.plan.gemm_spec import GEMM_DTYPES
from stitch_lsp.op_graph import OpNode

_TRANSPOSES = {"aten.permute.default", "aten.t.default", "aten.transpose.int"}


@define
class MatchedGemm:
    """An ``mm`` / ``addmm`` the family may take, with its operands as stored."""

    name: str
    a: str
    a_trans: bool
    b: str
    b_trans: bool
    b_shape: list[int]
    m: int
    n: int
    k: int
    dtype: str
    bias: str = ""
    bias_shape: list[int] = field(factory=list)
    alpha: float = 1.0
    beta: float = 1.0


def ref(arg: Any) -> str | None:
    return arg["$"] if isinstance(arg, dict) and "$" in arg else None


def _through_transpose(name: str, index: dict[str, OpNode]) -> tuple[str, bool]:
    """(stored tensor, transposed) for a 2-D matrix that may be a transpose of a stored one."""
    node = index[name]
    if node.op in _TRANSPOSES and len(node.shape) == 2:
        src = ref(node.args[0]) if node.args else None
        if src is not None and len(index[src].shape) == 2:
            if node.op == "aten.permute.default" and [d % 2 for d in node.args[1]] != [1, 0]:
                return name, False
            return src, True
    return name, False


def as_gemm(node: OpNode, index: dict[str, OpNode]) -> MatchedGemm | None:
    args, kw = node.args, node.kwargs
    if node.op == "aten.mm.default" and len(args) == 2 and not kw:
        bias, a, b, alpha, beta = None, ref(args[0]), ref(args[1]), 1.0, 1.0
    elif node.op == "aten.addmm.default" and len(args) == 3:
        if set(kw) - {"alpha", "beta"} or not all(isinstance(kw.get(x, 1), (int, float)) for x in ("alpha", "beta")):
            return None
        bias, a, b = ref(args[0]), ref(args[1]), ref(args[2])
        alpha, beta = float(kw.get("alpha", 1)), float(kw.get("beta", 1))
        if bias is None:
            return None
    else:
        return None
    if a is None or b is None or node.dtype not in GEMM_DTYPES or len(node.shape) != 2:
        return None
    A, B = index[a], index[b]
    if len(A.shape) != 2 or len(B.shape) != 2 or A.dtype != node.dtype or B.dtype != node.dtype:
        return None
    m, k = A.shape
    n = B.shape[1]
    if min(m, n, k) < 16:
        return None  # a tensor-core tile is 16 wide; smaller GEMMs gain nothing from a kernel of their own
    a_base, a_trans = _through_transpose(a, index)
    b_base, b_trans = _through_transpose(b, index)
    gemm = MatchedGemm(node.name, a_base, a_trans, b_base, b_trans, list(index[b_base].shape), m, n, k, node.dtype,
                 alpha=alpha, beta=beta)
    if bias is not None:
        bnode = index[bias]
        if bnode.dtype != node.dtype or not broadcasts(bnode.shape, (m, n)):
            return None
        gemm.bias, gemm.bias_shape = bias, list(bnode.shape)
    return gemm


def broadcasts(src, dst) -> bool:
    if len(src) > len(dst):
        return False
    return all(s in (1, d) for s, d in zip(reversed(tuple(src)), reversed(tuple(dst))))


def pairs_with(a: MatchedGemm, b: MatchedGemm) -> bool:
    return (a.a, a.a_trans, a.m, a.k, a.dtype) == (b.a, b.a_trans, b.m, b.k, b.dtype)

