"""The data that flows one way through the fuse pipeline: Task → Plan → Candidate.

(The Verdict lives in ``stitch_lsp.verdict``; Findings in ``stitch_lsp.findings``.)
All plain, serialisable attrs classes; see ``stitch_lsp.serde``.
"""

from __future__ import annotations

import hashlib

from attrs import define, field, frozen

from stitch_lsp.findings import Range
from stitch_lsp.op_graph import OpGraph


@frozen
class TensorSpec:
    shape: tuple[int, ...]
    dtype: str = "float32"  # torch dtype name without "torch."
    # The element strides the user's program passed (a recording's): None where the tensor is contiguous.
    strides: tuple[int, ...] | None = None


@define
class Task:
    """A KernelBench-format reference: ``class Model``, ``get_inputs``, ``get_init_inputs``."""

    name: str
    source: str  # the reference module's text
    inputs: list[TensorSpec] = field(factory=list)  # what get_inputs() returns, when known
    origin_path: str | None = None  # the user's file the selection came from
    origin_range: Range | None = None
    shape_source: str = ""  # get_inputs | comment | recorder | settings | file
    # Names of the selection's inputs / outputs, in call order (fuse only).
    input_names: list[str] = field(factory=list)
    output_names: list[str] = field(factory=list)

    def key(self) -> str:
        return hashlib.sha256(self.source.encode()).hexdigest()[:16]


@define
class FusionGroup:
    ops: list[str]  # aten-level op names in order, e.g. ["aten.addmm", "aten.gelu", "aten.mul"]
    # pointwise | row_reduction | col_reduction | scan | view | gemm | conv | pool | attention | torch
    kind: str = "pointwise"
    inputs: list[str] = field(factory=list)
    outputs: list[str] = field(factory=list)
    bytes_moved: int = 0  # fewest bytes the group must read + write
    flops: int = 0
    floor_us: float = 0.0  # max(bytes / bandwidth, flops / peak)
    covered: bool = True  # the template Coder handles it
    note: str = ""  # why it is not covered, or what the Coder will do


@define
class Plan:
    task_key: str
    groups: list[FusionGroup] = field(factory=list)
    device_name: str = ""
    bandwidth_gbs: float = 0.0  # what the floor was computed with
    peak_tflops: float = 0.0
    eager_kernels: int = 0  # kernels eager PyTorch launches for the task
    floor_us: float = 0.0
    predicted_speedup: float | None = None
    notes: list[str] = field(factory=list)
    # The traced aten graph the groups were cut from (what the template Coder lowers).
    graph: OpGraph | None = None
    # Fewest bytes / FLOPs of the whole task, and what eager PyTorch moves (estimated).
    bytes_moved: int = 0
    flops: int = 0
    eager_bytes: int = 0


@define
class Candidate:
    """A solution: a Python module defining ``ModelNew`` plus its CUDA sources."""

    module_source: str  # Python text defining ModelNew (binding)
    cuda_sources: dict[str, str] = field(factory=dict)  # file name -> CUDA text
    coder: str = "template"  # template | llm
    notes: list[str] = field(factory=list)
    uncovered_ops: list[str] = field(factory=list)  # left as PyTorch, by design
    # Ops fused into a library call instead of a kernel (a GEMM's activation in cuBLASLt's epilogue).
    library_fusions: list[str] = field(factory=list)
    # Of ``uncovered_ops``: those a library runs by design (GEMMs, convolutions, pooling) ...
    library_calls: list[str] = field(factory=list)
    # Patterns of several ops that run as one library call written for them (hand-written attention as
    # scaled_dot_product_attention): a rewrite worth verifying even when no kernel of ours runs.
    pattern_calls: list[str] = field(factory=list)
    # ... and those no template covers: what stops the task being covered (empty: covered).
    blocking_ops: list[str] = field(factory=list)

    @property
    def fuses_anything(self) -> bool:
        return bool(self.cuda_sources or self.library_fusions or self.pattern_calls)

    def fused_what(self) -> str:
        """What the candidate fuses, for a message: "2 kernels", "1 kernel + a cuBLASLt epilogue"."""
        n = len(self.cuda_sources)
        parts = [f"{n} kernel{'s' if n != 1 else ''}"] if n else []
        if self.library_fusions:
            k = len(self.library_fusions)
            parts.append("a cuBLASLt epilogue" if k == 1 else f"{k} cuBLASLt epilogues")
        if self.pattern_calls:
            k = len(self.pattern_calls)
            parts.append("a fused attention call" if k == 1 else f"{k} fused attention calls")
        return " + ".join(parts) or "nothing"

    def key(self) -> str:
        h = hashlib.sha256(self.module_source.encode())
        for name in sorted(self.cuda_sources):
            h.update(name.encode())
            h.update(self.cuda_sources[name].encode())
        return h.hexdigest()[:16]
