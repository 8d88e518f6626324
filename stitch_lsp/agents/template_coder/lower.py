"""A traced graph → a straight-line program: kernel launches and the PyTorch calls left over."""

from __future__ import annotations

from attrs import define, field

from stitch_lsp.agents import op_table
from stitch_lsp.agents.fusion import Group, split
from stitch_lsp.agents.template_coder.emitter import Unsupported
from stitch_lsp.agents.template_coder.gemm_match import GEMM_OP, fuse_gemms
from stitch_lsp.agents.template_coder.gemm_triton import gemm_kernel
from stitch_lsp.agents.template_coder.gemm_tiles import GemmOptions, default_options
from stitch_lsp.agents.template_coder.kernels import KernelSpec, col_kernel, pointwise_kernel, row_kernel
from stitch_lsp.agents.template_coder.library_epilogue import fold_library_epilogues
from stitch_lsp.op_graph import OpGraph


@define
class Step:
    """Either a kernel launch (``kernel`` set) or PyTorch calls for ``nodes``."""

    group: int
    nodes: list[str] = field(factory=list)
    kernel: KernelSpec | None = None
    why: str = ""  # why these nodes stay PyTorch, when they are not views or a library GEMM


@define
class LoweredProgram:
    graph: OpGraph
    groups: list[Group] = field(factory=list)
    steps: list[Step] = field(factory=list)
    kernels: list[KernelSpec] = field(factory=list)
    uncovered_ops: list[str] = field(factory=list)
    notes: list[str] = field(factory=list)
    library_fusions: list[str] = field(factory=list)  # ops folded into a library call's epilogue
    source_graph: OpGraph | None = None  # the traced graph, before GEMMs and their epilogues were merged
    gemm_mode: str = "auto"  # the GemmOptions mode it was lowered with (re-lowering for other shapes keeps it)


def lower(graph: OpGraph, gemm: GemmOptions | None = None) -> LoweredProgram:
    source = graph
    gemm = gemm or default_options()
    graph, _ = fuse_gemms(graph, gemm.choose)
    graph, folded = fold_library_epilogues(graph)
    groups = split(graph)
    index = graph.index()
    program = LoweredProgram(graph=graph, groups=groups, notes=list(folded), library_fusions=folded,
                             source_graph=source, gemm_mode=gemm.mode)
    for group in groups:
        if group.kind == "library" and index[group.nodes[0]].op == GEMM_OP:
            spec = gemm_kernel(index[group.nodes[0]])
            group.note = spec.note
            program.kernels.append(spec)
            program.steps.append(Step(group.index, list(group.nodes), kernel=spec))
            program.notes.append(f"{spec.name}: {spec.note}")
            continue
        if group.kind in ("pointwise", "row_reduction", "col_reduction") and not group.outputs:
            continue  # computes nothing anyone reads
        if group.kind in ("pointwise", "row_reduction", "col_reduction"):
            name = f"stitch_fused_{len(program.kernels)}"
            writer = {"pointwise": pointwise_kernel, "row_reduction": row_kernel, "col_reduction": col_kernel}[group.kind]
            try:
                spec = writer(group, index, name)
            except Unsupported as exc:
                group.note = str(exc)
                program.notes.append(f"group {group.index} ({group.kind}) stays PyTorch: {exc}")
                program.steps.append(Step(group.index, list(group.nodes), why=str(exc)))
                _uncovered(program, group, index, str(exc))
                continue
            group.note = spec.note
            program.kernels.append(spec)
            program.steps.append(Step(group.index, list(group.nodes), kernel=spec))
            program.notes.append(f"{name}: {group.kind}, {spec.note}")
            continue
        why = ""
        if group.kind == "library":
            group.note = "cuBLAS through torch" + (" (TF32 allowed, as in the reference)" if graph.allow_tf32 else "")
        elif group.kind == "torch":
            why = f"{op_table.short(index[group.nodes[0]].op)} has no template"
        group.note = group.note or why
        program.steps.append(Step(group.index, list(group.nodes), why=why))
        if group.kind != "view":
            _uncovered(program, group, index, group.note)
    return program


def _uncovered(program: LoweredProgram, group: Group, index, why: str) -> None:
    for n in group.nodes:
        node = index[n]
        if op_table.classify(node.op, node.dtype) == "view" or node.op == "getitem":
            continue
        label = node.op + (f" ({why})" if why else "")
        if label not in program.uncovered_ops:
            program.uncovered_ops.append(label)
