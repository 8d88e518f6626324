"""A traced graph → a straight-line program: kernel launches and the PyTorch calls left over."""

from __future__ import annotations

from attrs import define, field

from stitch_lsp.plan import library_calls, op_table
from stitch_lsp.plan.attention import fold_attention, fold_attention_probs
from stitch_lsp.plan.fusion import Group, simplify, split, split_tail, split_windows
from stitch_lsp.coders.template.conv_chain import chain_kernel, layout_plan
from stitch_lsp.coders.template.conv_tail import input_kernel, reduction_tail, tail_kernel, transpose_kernel
from stitch_lsp.coders.template.emitter import Unsupported
from stitch_lsp.plan.gemm_match import fuse_gemms
from stitch_lsp.plan.gemm_tiles import GemmOptions, default_options
from stitch_lsp.coders.template.kernels import KernelSpec, pointwise_kernel, window_kernel
from stitch_lsp.coders.template.reductions import reduction_kernels
from stitch_lsp.coders.template.scan_kernel import scan_kernel
from stitch_lsp.coders.template.size_split import split_by_size
from stitch_lsp.coders.template.library_call import describe as describe_library, lower_library
from stitch_lsp.coders.template.attention.probs_kernel import takes as probs_takes
from stitch_lsp.coders.template.conv_bias import split_conv_bias
from stitch_lsp.coders.template.library_epilogue import fold_library_epilogues
from stitch_lsp.op_graph import OpGraph


# group kind -> the writer of its kernel(s): a KernelSpec, or a list of them run in order.
KERNEL_WRITERS = {"pointwise": pointwise_kernel, "row_reduction": reduction_kernels, "col_reduction": reduction_kernels,
                  "scan": scan_kernel, "window": window_kernel}


@define
class Step:
    """Either a kernel launch (``kernel`` set) or PyTorch calls for ``nodes``."""

    group: int
    nodes: list[str] = field(factory=list)
    kernel: KernelSpec | None = None
    why: str = ""  # why these nodes stay PyTorch, when they are not views or a library GEMM
    layout: str = ""  # a convolution run in this memory format ("channels_last"), not NCHW
    convert: KernelSpec | None = None  # the kernel that writes the convolution's input in ``layout``


@define
class LoweredProgram:
    graph: OpGraph
    groups: list[Group] = field(factory=list)
    steps: list[Step] = field(factory=list)
    kernels: list[KernelSpec] = field(factory=list)
    uncovered_ops: list[str] = field(factory=list)
    notes: list[str] = field(factory=list)
    library_fusions: list[str] = field(factory=list)  # ops folded into a library call's epilogue
    pattern_calls: list[str] = field(factory=list)  # hand-written attention taken as one library call
    # The attention nodes folded from hand-written attention: their kernel keeps the written code's NaN / Inf
    # (a masked key's 0 times v still reaches the sum), as PyTorch's fused attention does not.
    written_attention: list[str] = field(factory=list)
    library_calls: list[str] = field(factory=list)  # ops a library runs by design (cuBLAS, cuDNN, pooling)
    # Ops left to PyTorch because no template covers them: what stops the task being covered.
    blocking_ops: list[str] = field(factory=list)
    source_graph: OpGraph | None = None  # the traced graph, before GEMMs and their epilogues were merged
    gemm_mode: str = "auto"  # the GemmOptions mode it was lowered with (re-lowering for other shapes keeps it)
    conv_layouts: dict = field(factory=dict)  # convolution -> plan.conv_layout.ConvLayout
    # group -> the values it reads in channels-last order between chained convolutions (``conv_chain``)
    chained: dict = field(factory=dict)
    written_channels_last: dict = field(factory=dict)  # value -> the memory format a chained kernel writes
    # A returned value written in channels-last -> its copy in NCHW, which forward returns instead.
    returned_as: dict = field(factory=dict)
    # "nchw": lowered with channels-last convolutions turned off (re-lowering for other shapes keeps it).
    conv_layout: str = ""
    # False: hand-written attention was lowered as written, not as one fused call; "library": attention calls
    # stay PyTorch's fused attention, not the kernel of our own (re-lowering keeps either).
    attention: bool | str = True

    @property
    def covered(self) -> bool:
        """Every op runs in a generated kernel or a library call."""
        return not self.blocking_ops


def sm_of(device_name: str) -> int:
    """The compute capability to write kernels for, from the plan's device name (Hopper when unknown, as the
    Planner assumes an H100)."""
    name = device_name.upper()
    if any(k in name for k in ("A100", "A10", "A30", "A40", "A6000", "L4", "L40", "RTX", "V100", "T4")):
        return 80
    return 90


def lower(graph: OpGraph, gemm: GemmOptions | None = None, sm: int = 90,
          channels_last: bool | None = None, attention: bool | str = True) -> LoweredProgram:
    """``gemm``: which GEMMs the GEMM family takes (with their epilogues; the rest stay cuBLAS calls);
    ``sm``: the compute capability the kernels are for (Hopper's clusters from 90); the Planner's H100 by
    default, the device's own when a candidate re-lowers itself for new shapes; ``channels_last``: whether
    a convolution with a pointwise tail may run in channels-last (None: ``STITCH_CONV_LAYOUT``, default on);
    ``attention``: whether hand-written attention is taken as one ``scaled_dot_product_attention`` call
    (False: its GEMMs, mask and softmax are lowered as written, as when the fused call failed the Verifier;
    ``library_call.LIBRARY``: taken, but every attention call runs as PyTorch's fused attention, not as the
    kernel of our own)."""
    program, index = _grouped(graph, gemm or default_options(), channels_last, attention)
    layouts = program.conv_layouts
    # tail group -> convolution (a chained convolution's readers are in ``program.chained`` instead)
    reads_channels_last = {c.tail: c.conv for c in layouts.values() if c.channels_last and c.tail >= 0}
    pending = list(program.groups)
    while pending:
        group = pending.pop(0)
        if group.kind in KERNEL_WRITERS and not group.outputs:
            continue  # computes nothing anyone reads
        if group.kind in KERNEL_WRITERS:
            _lower_kernels(program, group, index, pending, reads_channels_last, sm)
        elif group.kind == "update":
            # A buffer the module updates in place (BatchNorm's running statistics): a copy, by design.
            program.steps.append(Step(group.index, list(group.nodes), why="updates a buffer in place"))
        else:
            _lower_calls(program, group, index)
    _returned_in_nchw(program, index)
    return program


def _returned_in_nchw(program: LoweredProgram, index) -> None:
    """A returned value that a chained kernel wrote in channels-last, copied back to NCHW (as the reference
    returns it) by the program's own transpose kernel."""
    for o in dict.fromkeys(program.graph.outputs):
        if o not in program.written_channels_last or o in program.returned_as:
            continue
        spec = transpose_kernel(index[o], f"stitch_layout_{len(program.kernels)}", to_channels_last=False)
        if spec is None:
            continue
        program.kernels.append(spec)
        program.steps.append(Step(-1, [o], kernel=spec))
        program.notes.append(f"{spec.name}: {spec.note}")
        program.returned_as[o] = spec.outputs[0]


def _grouped(graph: OpGraph, gemm: GemmOptions, channels_last: bool | None,
             attention: bool | str) -> tuple[LoweredProgram, dict]:
    """The program before any step: the graph with attention, GEMMs and their epilogues and convolution biases
    folded as the options say, split into groups, with each convolution's layout; and the graph's index."""
    source = graph
    graph = simplify(graph)
    taken, probs = [], {}
    if attention:
        graph, taken, _ = fold_attention(graph)
    if attention is True:  # not when attention is left to the library (the attention kernel's fallback)
        graph, probs = fold_attention_probs(graph, probs_takes)
    graph, _ = fuse_gemms(graph, gemm.choose)
    graph, folded = fold_library_epilogues(graph)
    graph, moved = split_conv_bias(graph)
    groups = split(graph)
    index = graph.index()
    notes = [m.describe() for m in taken] + list(probs.values()) + list(folded) + moved
    program = LoweredProgram(graph=graph, groups=groups, notes=notes,
                             library_fusions=folded, pattern_calls=[m.describe() for m in taken],
                             written_attention=[m.node for m in taken],
                             source_graph=source, gemm_mode=gemm.mode,
                             conv_layout="nchw" if channels_last is False else "", attention=attention)
    layouts = layout_plan(graph, groups, index, channels_last)
    program.conv_layouts, program.chained = layouts.convs, layouts.chained
    program.written_channels_last = layouts.written
    return program, index


def _lower_kernels(program: LoweredProgram, group: Group, index, pending: list[Group],
                   reads_channels_last: dict, sm: int) -> None:
    """A group a kernel writer takes: its kernel(s); when none can be written, the smaller groups it splits
    into (put first in ``pending``), else its ops stay PyTorch."""
    name = f"stitch_fused_{len(program.kernels)}"
    try:
        writer = KERNEL_WRITERS[group.kind]
        if group.index in program.chained and group.kind in ("pointwise", "window"):
            specs = chain_kernel(group, index, name, program.chained[group.index])
        elif group.index in program.chained:
            specs = reduction_tail(group, index, name, program.chained[group.index], sm=sm)
        elif group.index in reads_channels_last and group.kind == "pointwise":
            specs = tail_kernel(group, index, name, reads_channels_last[group.index])
        elif group.index in reads_channels_last:
            specs = reduction_tail(group, index, name, reads_channels_last[group.index], sm=sm)
        else:
            specs = writer(group, index, name, sm=sm) if writer is reduction_kernels else writer(group, index, name)
    except Unsupported as exc:
        parts, note = _smaller_groups(group, index, exc)
        if parts:
            program.notes.append(note)
            pending[:0] = parts
            return
        group.note = str(exc)
        program.notes.append(f"group {group.index} ({group.kind}) stays PyTorch: {exc}")
        program.steps.append(Step(group.index, list(group.nodes), why=str(exc)))
        _uncovered(program, group, index, str(exc))
        return
    specs = specs if isinstance(specs, list) else [specs]
    group.note = specs[-1].note
    for spec in specs:
        program.kernels.append(spec)
        program.steps.append(Step(group.index, list(group.nodes), kernel=spec))
        program.notes.append(f"{spec.name}: {group.kind}, {spec.note}")


def _smaller_groups(group: Group, index, exc: Unsupported) -> tuple[list[Group] | None, str]:
    """The groups a group whose kernel cannot be written splits into (None: it does not), and the note
    that says so."""
    if group.kind == "pointwise":
        # One kernel per output size, each recomputing what it needs from the group's inputs.
        return split_by_size(group, index), f"group {group.index} (pointwise): {exc}; one kernel per output size"
    if group.kind == "window":
        # Each pooling op in a kernel of its own, the pointwise work between them in others.
        return split_windows(group, index), f"group {group.index} (window): {exc}; each pooling op runs alone"
    # The reductions in one kernel, what follows them in another.
    return split_tail(group, index), (f"group {group.index} ({group.kind}): {exc}; its tail runs as a "
                                      "separate pointwise kernel")


def _lower_calls(program: LoweredProgram, group: Group, index) -> None:
    """A group no kernel writer takes: a library call (our own kernel where one is written for it, a
    convolution in its layout), a view, or ops with no template, left to PyTorch."""
    graph, layouts = program.graph, program.conv_layouts
    why = ""
    if group.kind == "library":
        spec = lower_library(group, index, graph, program.attention, frozenset(program.written_attention))
        if spec is not None:
            program.kernels.append(spec)
            program.steps.append(Step(group.index, list(group.nodes), kernel=spec))
            program.notes.append(f"{spec.name}: {spec.note}")
            return
        group.note = describe_library(group, index, graph)
        conv = next((layouts[n] for n in group.nodes if n in layouts), None)
        if conv is not None:
            program.notes.append(f"{conv.conv}: {conv.describe()}")
            if conv.channels_last:
                # No conversion where a chained kernel already writes the input in channels-last.
                first = index[conv.conv].args[0]
                chained_input = isinstance(first, dict) and first.get("$") in program.written_channels_last
                convert = None if chained_input else input_kernel(index[conv.conv], index,
                                                                  f"stitch_layout_{len(program.kernels)}")
                if convert is not None:
                    program.kernels.append(convert)
                    program.notes.append(f"{convert.name}: {convert.note}")
                program.steps.append(Step(group.index, list(group.nodes), layout=conv.layout, convert=convert))
                _uncovered(program, group, index, group.note, library=True)
                group.note += f"; {conv.describe()}"
                return
    elif group.kind == "torch":
        why = f"{op_table.short(index[group.nodes[0]].op)} has no template"
    group.note = group.note or why
    program.steps.append(Step(group.index, list(group.nodes), why=why))
    if group.kind != "view":
        _uncovered(program, group, index, group.note, library=group.kind == "library")


def _uncovered(program: LoweredProgram, group: Group, index, why: str, library: bool = False) -> None:
    for n in group.nodes:
        node = index[n]
        if op_table.classify(node.op, node.dtype) == "view" or node.op == "getitem":
            continue
        label = node.op + (f" ({why})" if why else "")
        if label not in program.uncovered_ops:
            program.uncovered_ops.append(label)
        listed = program.library_calls if library else program.blocking_ops
        if label not in listed:
            listed.append(label)
        for inner in library_calls.DISPATCHES_TO.get(node.op, []) if library else []:
            if inner not in program.uncovered_ops:
                program.uncovered_ops.append(inner)
