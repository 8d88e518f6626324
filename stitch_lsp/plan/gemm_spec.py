"""The GEMM family's kernel as data: what one ``stitch.gemm`` node computes, stored on the node.

A ``GemmSpec`` holds the GEMM's operands, its accumulators (one, or two that one epilogue reads together),
the epilogue ops in graph order and the tensors they load; ``gemm_match`` builds it, the template Coder's
``gemm_triton`` writes the kernel from it.
"""

from __future__ import annotations

import json

from attrs import define, field

from stitch_lsp.plan import op_table
from stitch_lsp.plan.gemm_ops import TRITON_POINTWISE
from stitch_lsp.op_graph import OpNode
from stitch_lsp.serde import from_dict

GEMM_OP = "stitch.gemm"
GEMM_DTYPES = ("float32", "bfloat16", "float16")
LEAF_DTYPES = ("float32", "bfloat16", "float16", "bool", "int32", "int64")
MAX_ACCUMULATORS = 2  # registers: two 128x128 fp32 accumulators already take 128 a thread
# Row reductions over the GEMM's N (softmax, logsumexp, sums, max) fuse when one tile holds a whole row.
ROW_TILE_MAX = 256
ROW_REDUCTIONS = {"aten.sum.dim_IntList", "aten.mean.dim", "aten.amax.default", "aten.amin.default"}


@define
class GemmAcc:
    """One accumulator: ``A @ B[:, offset : offset + N]`` (then ``alpha *`` it ``+ beta * bias``)."""

    gemm: str  # the mm / addmm node it computes
    b: str  # B's tensor
    b_trans: bool  # B is stored as [N_full, K] (a linear layer's weight) and read transposed
    b_shape: list[int]  # the stored tensor's shape
    offset: int = 0  # first output column of the GEMM this accumulator covers
    bias: str = ""  # addmm's bias, broadcast over [M, N_full]
    bias_shape: list[int] = field(factory=list)
    alpha: float = 1.0
    beta: float = 1.0
    n_full: int = 0  # the GEMM's own output width


@define
class EpilogueNode:
    """An op the kernel computes after the GEMM (a copy of the graph's node)."""

    name: str
    op: str
    args_json: str
    kwargs_json: str
    shape: list[int]
    dtype: str

    def node(self) -> OpNode:
        return OpNode(self.name, self.op, self.args_json, self.kwargs_json, tuple(self.shape), self.dtype)


@define
class LeafRead:
    """A tensor the epilogue loads: ``base`` read as a tensor of ``shape`` (a reshaped view of it, or itself)."""

    base: str
    shape: list[int]
    dtype: str


@define
class GemmSpec:
    """Everything the kernel writer needs; stored on the ``stitch.gemm`` node."""

    a: str
    a_trans: bool  # A is stored as [K, M]
    m: int
    n: int  # the tile domain's width: the epilogue's (or the GEMM's) output columns
    k: int
    dtype: str
    precision: str  # "tf32x3" | "tf32" for fp32 inputs; "" for bf16 / fp16 (one pass)
    accs: list[GemmAcc] = field(factory=list)
    acc_of: dict[str, int] = field(factory=dict)  # the GEMMs and their views -> accumulator
    epilogue: list[EpilogueNode] = field(factory=list)  # in graph order
    reads: dict[str, LeafRead] = field(factory=dict)  # name an epilogue op reads -> what to load
    outputs: list[str] = field(factory=list)
    output_shapes: list[list[int]] = field(factory=list)
    output_dtypes: list[str] = field(factory=list)
    tile: list[int] = field(factory=list)  # BM, BN, BK, GROUP_M, warps, stages (gemm_tiles.Tile)
    tile_source: str = ""  # "cache" (measured here) | "table" (measured on an H100, by shape class)
    constants: list[str] = field(factory=list)  # epilogue values made of constants (also left in the graph)
    rows: list[str] = field(factory=list)  # epilogue values with one element per row (after a row reduction)

    @property
    def flops(self) -> int:
        return 2 * self.m * self.n * self.k * len(self.accs)

    @property
    def reduces_rows(self) -> bool:
        """The epilogue reduces over the tile's columns: one tile must hold a whole row."""
        return any(e.op in ROW_REDUCTIONS for e in self.epilogue)

    def leaves(self) -> list[str]:
        """The kernel's tensor parameters after A and the B's: biases and epilogue inputs, each once."""
        out: list[str] = []
        for acc in self.accs:
            if acc.bias and acc.bias not in out:
                out.append(acc.bias)
        for read in self.reads.values():
            if read.base not in out:
                out.append(read.base)
        return out

    def inputs(self) -> list[str]:
        return [self.a] + [acc.b for acc in self.accs] + self.leaves()

    def input_specs(self) -> list[tuple[list[int], str]]:
        """(shape, dtype) of each of ``kernel_inputs()`` (a leaf read through a reshape: the view's shape,
        which has the base's elements in the base's order)."""
        shapes: dict[str, tuple[list[int], str]] = {
            self.a: ([self.k, self.m] if self.a_trans else [self.m, self.k], self.dtype)}
        for acc in self.accs:
            shapes.setdefault(acc.b, (list(acc.b_shape), self.dtype))
            if acc.bias:
                shapes.setdefault(acc.bias, (list(acc.bias_shape), self.dtype))
        for read in self.reads.values():
            shapes.setdefault(read.base, (list(read.shape), read.dtype))
        return [shapes[name] for name in self.kernel_inputs()]

    def kernel_inputs(self) -> list[str]:
        """``inputs()`` without repeats (a GEGLU's two accumulators read one weight): the kernel's parameters."""
        return list(dict.fromkeys(self.inputs()))

    def describe(self) -> str:
        ops = [op_table.short(e.op) for e in self.epilogue
               if (e.op in TRITON_POINTWISE or e.op in ROW_REDUCTIONS) and e.op != "aten._to_copy.default"]
        kind = {"tf32x3": "3xTF32 (fp32 accuracy)", "tf32": "TF32, as the reference allows"}.get(
            self.precision, f"{self.dtype}, one pass")
        two = f", {len(self.accs)} accumulators" if len(self.accs) > 1 else ""
        tail = f" + epilogue {', '.join(ops)}" if ops else ""
        return f"Triton GEMM {self.m}x{self.n}x{self.k} {kind}{two}{tail}"


def spec_of(node: OpNode) -> GemmSpec:
    return from_dict(json.loads(node.kwargs_json)["spec"], GemmSpec)
