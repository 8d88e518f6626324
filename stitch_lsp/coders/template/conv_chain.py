"""Convolutions chained in channels-last: the kernels between them read and write that order.

A convolution run in channels-last alone (``conv_tail``) pays two transposes: its NCHW input written in
channels-last before it, and its output written back to NCHW by the tail kernel. In a net of convolutions
(a ResNet block: convolution, BatchNorm and ReLU, convolution, BatchNorm, the residual add and ReLU) the
next convolution converts that NCHW output straight back. ``torch.compile`` keeps such a net channels-last
from end to end. So where every reader of a pointwise kernel's output takes channels-last as it lies (a
convolution's input, another such kernel, a reduction that reads that order), the kernel runs in the
channels-last order itself: its group is rewritten in the physical order (N, spatial..., C) as
``conv_reduction`` does for reductions, it reads its full-size inputs and writes its outputs in
channels-last, and the next convolution takes the output with no copy. A full-size input that arrives in
NCHW (forward's own input, a pooling kernel's output) is converted by the binding. The decision is a
fixed point: a kernel stays in the chain only while all its readers do.
"""

from __future__ import annotations

from attrs import define, field

from stitch_lsp.plan import library_calls
from stitch_lsp.plan.conv_layout import READS_CHANNELS_LAST, ConvLayout
from stitch_lsp.plan.fusion import Group
from stitch_lsp.coders.template.conv_reduction import moves, physical_index
from stitch_lsp.coders.template.conv_tail import (DTYPES, FORMATS, IN_ORDER, REDUCTION_KINDS, conv_layouts, enabled,
                                                  idles_in_order, is_depthwise, nchw_reason)
from stitch_lsp.coders.template.emitter import Unsupported
from stitch_lsp.coders.template.kernels import KernelSpec, pointwise_kernel, window_kernel
from stitch_lsp.op_graph import OpGraph, OpNode

CHAINED = "its readers take channels-last as it lies"
_CHAINED_KINDS = ("pointwise", "window")  # groups that run in channels-last order between convolutions


@define
class LayoutPlan:
    """Each convolution's layout, and the groups that run in channels-last order between them."""

    convs: dict[str, ConvLayout] = field(factory=dict)
    # group -> the values it reads in channels-last order (a pointwise group writes its outputs so too)
    chained: dict[int, frozenset[str]] = field(factory=dict)
    written: dict[str, str] = field(factory=dict)  # value -> the memory format a chained kernel writes it in


def chained_layouts(graph: OpGraph, groups: list[Group], index: dict[str, OpNode],
                    channels_last: bool | None = None) -> dict[str, ConvLayout]:
    """``conv_layouts`` with the chains: the Planner's notes name the same layouts the Coder lowers."""
    return layout_plan(graph, groups, index, channels_last).convs


def layout_plan(graph: OpGraph, groups: list[Group], index: dict[str, OpNode],
                channels_last: bool | None = None) -> LayoutPlan:
    convs = conv_layouts(graph, groups, index, channels_last)
    if not (enabled() if channels_last is None else channels_last):
        return LayoutPlan(convs)
    outputs = set(graph.outputs)
    readers: dict[str, list[Group]] = {}
    for g in groups:
        for i in g.inputs:
            readers.setdefault(i, []).append(g)
    by_index = {g.index: g for g in groups}
    conv_of = {g.index: _conv_node(g, index) for g in groups if g.kind == "library"}
    ok_convs = {c for c in convs if not nchw_reason(index[c], outputs, index, chained=True)}
    chain = {g.index for g in groups if g.kind in _CHAINED_KINDS and g.outputs
             and all(len(index[o].shape) in FORMATS for o in g.outputs)}
    ordered: dict[int, frozenset[str]] = {}  # reductions that read channels-last values in that order

    def takes(reader: Group, value: str, nhwc: set[str]) -> bool:
        if reader.index in chain or reader.index in ordered or not moves(index[value].shape):
            return True  # (a value whose two layouts are the same bytes, (N, C, 1, 1) say, suits any reader)
        conv = conv_of.get(reader.index)
        # A convolution in channels-last (chained, or alone with its transposing tail) takes a channels-last
        # input as it lies, if that is its input and nothing else.
        return (conv is not None and (conv.name in ok_convs or (conv.name in convs and convs[conv.name].channels_last))
                and _only_input(conv, value))

    changed = True
    while changed:
        changed = False
        nhwc = set(ok_convs) | {o for gi in chain for o in by_index[gi].outputs}
        ordered = {g.index: frozenset(i for i in g.inputs if i in nhwc) for g in groups
                   if g.kind in REDUCTION_KINDS and _reads_in_order(g, index, nhwc, set(convs))}
        for c in sorted(ok_convs):
            rs = readers.get(c, [])
            # A depthwise convolution only where its input arrives in channels-last (see ``nchw_reason``).
            alone = is_depthwise(index[c], index) and _input_of(index[c]) not in nhwc
            if alone or not rs or not all(takes(r, c, nhwc) for r in rs):
                ok_convs.discard(c)
                changed = True
        for gi in sorted(chain):
            g = by_index[gi]
            if (not any(i in nhwc for i in g.inputs) or _returned(g, index, outputs, nhwc)
                    or not all(takes(r, o, nhwc) for o in g.outputs for r in readers.get(o, []))
                    or _framed(g, index, nhwc) is None):
                chain.discard(gi)
                changed = True
    nhwc = set(ok_convs) | {o for gi in chain for o in by_index[gi].outputs}
    plan = LayoutPlan(convs)
    for gi in chain:
        plan.chained[gi] = _framed(by_index[gi], index, nhwc)
        for o in by_index[gi].outputs:
            if moves(index[o].shape):
                plan.written[o] = FORMATS[len(index[o].shape)]
    for gi, read in ordered.items():
        if read:
            plan.chained[gi] = read
    for c in ok_convs:
        if convs[c].why == IN_ORDER:
            continue  # read by one reduction in its order, as ``conv_tail`` already decided and says
        node = index[c]
        plan.convs[c] = ConvLayout(c, FORMATS[len(node.shape)], CHAINED, -1, node.dtype == "float32")
    return plan


def _tail_alone(group: Group, nhwc: set[str]) -> bool:
    """Whether a group whose output forward returns reads one convolution's output in channels-last and nothing
    else so: as ``conv_tail``'s tail it writes NCHW directly. Chained, it would write channels-last and the
    program would copy its output back to NCHW (``conv_tail.transpose_kernel``): worth it only where it reads
    several channels-last values (a residual add, a cat of branches), which one tail cannot."""
    return sum(i in nhwc for i in group.inputs) <= 1


def _returned(group: Group, index: dict[str, OpNode], outputs: set[str], nhwc: set[str]) -> bool:
    """Whether a group whose output forward returns stays out of the chain (see ``_tail_alone``; and a value no
    transpose kernel copies, of another dtype)."""
    mine = [o for o in group.outputs if o in outputs]
    return bool(mine) and (_tail_alone(group, nhwc) or any(index[o].dtype not in DTYPES for o in mine))


def _conv_node(group: Group, index: dict[str, OpNode]) -> OpNode | None:
    return next((index[n] for n in group.nodes if library_calls.library_kind(index[n].op) == "conv"), None)


def _input_of(conv: OpNode) -> str | None:
    first = conv.args[0]
    return first.get("$") if isinstance(first, dict) else None


def _only_input(conv: OpNode, value: str) -> bool:
    """Whether ``value`` is the convolution's input and not also its weight or bias."""
    first = conv.args[0]
    return isinstance(first, dict) and first.get("$") == value and conv.refs().count(value) == 1


def _framed(group: Group, index: dict[str, OpNode], nhwc: set[str]) -> frozenset[str] | None:
    """The inputs a chained pointwise group reads in channels-last order (those in ``nhwc``, and full-size ones
    in NCHW, which the binding converts), or None where it cannot be written in that order."""
    ranks = {len(index[o].shape) for o in group.outputs}
    if len(ranks) != 1:
        return None
    (rank,) = ranks
    framed = frozenset(i for i in group.inputs
                       if len(index[i].shape) == rank and (i in nhwc or moves(index[i].shape)))
    if not framed or not any(i in nhwc for i in framed):
        return None
    try:
        physical_index(group, index, framed, writes=True)
    except Unsupported:
        return None
    return framed


def _reads_in_order(group: Group, index: dict[str, OpNode], nhwc: set[str], convs: set[str]) -> bool:
    """Whether a reduction group reading channels-last values reads them in that order, and, where it reads only
    convolutions' outputs, as fast as it would read NCHW (few rows side by side leave most of the GPU idle, see
    ``conv_tail``; there the alternative is a convolution in NCHW). After a chained kernel the alternative is
    ending the chain, which costs more than an idle share of one reduction."""
    read = frozenset(i for i in group.inputs if i in nhwc)
    if not read:
        return False
    try:
        idle = idles_in_order(group, index, read)
    except Unsupported:
        return False
    return not idle or not read <= convs


def chain_kernel(group: Group, index: dict[str, OpNode], name: str, framed: frozenset[str]) -> KernelSpec:
    """The kernel of a chained pointwise or pooling group: one pass over its outputs in channels-last order (a
    pool's window read across neighbouring positions, a warp's threads on neighbouring channels)."""
    physical = physical_index(group, index, framed, writes=True)
    spec = (window_kernel(group, physical, name, staged=False, named=index) if group.kind == "window"
            else pointwise_kernel(group, physical, name))
    spec.layouts = {v: FORMATS[len(index[v].shape)] for v in sorted(framed) if moves(index[v].shape)}
    spec.out_layouts = {o: FORMATS[len(index[o].shape)] for o in group.outputs if moves(index[o].shape)}
    spec.note += (f"; reads {', '.join(sorted(framed))} {READS_CHANNELS_LAST} through its own order (N, spatial, C)"
                  " and writes its output so")
    return spec
