"""The Planner: a traced graph → fusion groups with the bytes, FLOPs and floor time of each.

Pure arithmetic over ``stitch_lsp.op_graph`` (the tracing itself runs in a
worker, ``stitch_lsp.worker.trace_handler``). Floors use the device's measured
copy bandwidth and GEMM rate where the Verifier has measured them, else H100
figures (DESIGN.md: ~3.0 TB/s copy).
"""

from __future__ import annotations

import math
from typing import Callable

from stitch_lsp.plan import library_calls, op_table
from stitch_lsp.plan.attention import attention_flops, fold_attention, fold_attention_probs, plan_note
from stitch_lsp.plan.fusion import Group, domain, simplify, split
from stitch_lsp.plan.conv_layout import ConvLayout
from stitch_lsp.plan.gemm_match import fuse_gemms
from stitch_lsp.plan.gemm_spec import GEMM_OP, GemmSpec, spec_of
from stitch_lsp.plan.gemm_tiles import GemmOptions, default_options
from stitch_lsp.op_graph import OpGraph, OpNode
from stitch_lsp.pipeline import FusionGroup, Plan, Task
from stitch_lsp.verdict import DeviceInfo

H100_COPY_GBS = 3000.0
# Dense peaks (TFLOP/s): fp32 without tensor cores, TF32, and bf16 / fp16 tensor cores. 3xTF32 does three
# TF32 products for each fp32 one: a third of the TF32 rate.
H100_PEAK_TFLOPS = {"float32": 60.0, "tf32": 400.0, "bfloat16": 800.0, "float16": 800.0}
H100_PEAK_TFLOPS["tf32x3"] = H100_PEAK_TFLOPS["tf32"] / 3
LAUNCH_US = 2.5  # what one extra kernel launch costs eager PyTorch, roughly
H100_L2_BYTES = 50 << 20
KERNEL_KINDS = ("pointwise", "row_reduction", "col_reduction", "scan", "window")
LIBRARY_KINDS = ("gemm", "conv", "pool", "attention", "random")
GROUP_NOTES = {
    "pointwise": "one vectorised pass (16-byte loads)",
    "row_reduction": "rows of the last dimension(s): a warp, a block or (few long rows) several blocks per row, "
                     "fp32 accumulation",
    "col_reduction": "reduced dimensions that are not the last: threads along the kept ones, each reduction "
                     "split over several threads",
    "scan": "a running sum / product along one dimension: a block per row, a scan across its threads",
    "window": "pooling windows (max / average), with the pointwise work around them: a thread per output "
              "element, the input read once",
    "view": "views: no data moves",
    "torch": "no template: stays PyTorch",
}


def _bytes(node: OpNode) -> int:
    return node.numel * op_table.DTYPE_BYTES.get(node.dtype, 4)


def _library_flops(node: OpNode, index: dict[str, OpNode]) -> int:
    kind = library_calls.library_kind(node.op)
    if kind == "conv":
        args = node.args
        x, w = index[args[0]["$"]], index[args[1]["$"]]
        transposed = bool(args[6]) if len(args) > 6 else False
        window = math.prod(w.shape[2:]) if len(w.shape) > 2 else 1
        # Each output (input, when transposed) element takes a dot product of w's per-group fan-in.
        return 2 * (x.numel * w.shape[1] * window if transposed else node.numel * w.shape[1] * window)
    if kind == "attention":
        return attention_flops(node, index)
    if kind == "pool":
        refs = [index[r] for r in node.refs()]
        return max([r.numel for r in refs] + [node.numel])
    return _gemm_flops(node, index)


def _gemm_flops(node: OpNode, index: dict[str, OpNode]) -> int:
    refs = [index[r] for r in node.refs()]
    mats = [r for r in refs if len(r.shape) >= 2]
    if len(mats) < 2:
        return 0
    a = mats[-2]
    k = a.shape[-1]
    return 2 * node.numel * k


def gemm_family_peak(spec: GemmSpec) -> float:
    """The tensor-core rate (TFLOP/s) a GEMM-family kernel's floor is computed at."""
    return H100_PEAK_TFLOPS[spec.precision or spec.dtype]


def _gemm_family_figures(spec: GemmSpec, index: dict[str, OpNode]) -> tuple[int, int]:
    moved = sum(_bytes(index[i]) for i in spec.kernel_inputs())
    moved += sum(math.prod(s) * op_table.DTYPE_BYTES.get(d, 4) for s, d in zip(spec.output_shapes, spec.output_dtypes))
    return moved, spec.flops


def _group_figures(group: Group, index: dict[str, OpNode]) -> tuple[int, int]:
    if group.kind == "view":
        return 0, 0
    if group.kind == "library" and index[group.nodes[0]].op == GEMM_OP:
        return _gemm_family_figures(spec_of(index[group.nodes[0]]), index)
    moved = sum(_bytes(index[i]) for i in group.inputs if index[i].op != "getitem" or index[i].shape)
    moved += sum(_bytes(index[o]) for o in group.outputs) + _second_read(group, index)
    flops = 0
    for n in group.nodes:
        node = index[n]
        klass = op_table.classify(node.op, node.dtype)
        if klass == "library":
            flops += _library_flops(node, index)
        elif klass == "window":
            flops += index[node.refs()[0]].numel
        elif klass in ("pointwise", "reduction"):
            src = index[node.refs()[0]] if node.refs() else node
            flops += max(node.numel, src.numel) * op_table.FLOPS.get(node.op, 1)
    return moved, flops


def _second_read(group: Group, index: dict[str, OpNode]) -> int:
    """The bytes a reduction group must read twice whatever the kernel: its full-size inputs, where full-size
    outputs depend on a reduction whose rows are larger than L2 (a tensor divided by its own norm: the first
    output waits for the last input, which by then has pushed the first out of every cache). Rows that fit in
    L2 are counted once, as a kernel could read them once."""
    if group.kind not in ("row_reduction", "col_reduction"):
        return 0
    reductions = [n for n in group.nodes if op_table.classify(index[n].op, index[n].dtype) == "reduction"]
    if not reductions:
        return 0
    dom = domain(index[reductions[0]], index)
    full = [i for i in group.inputs if index[i].numel == dom.numel]
    if dom.row_len * sum(op_table.DTYPE_BYTES.get(index[i].dtype, 4) for i in full) <= H100_L2_BYTES:
        return 0
    after = set(reductions)
    for n in group.nodes:
        if any(r in after for r in index[n].refs()):
            after.add(n)
    if not any(o in after and index[o].numel == dom.numel for o in group.outputs):
        return 0
    return sum(_bytes(index[i]) for i in full)


def _eager_bytes(graph: OpGraph, index: dict[str, OpNode]) -> tuple[int, int]:
    """What eager PyTorch moves: every non-view op reads its inputs and writes its output."""
    total = kernels = 0
    for node in graph.nodes:
        klass = op_table.classify(node.op, node.dtype)
        if (klass in ("view", "creation") and node.op not in op_table.COPYING_VIEW_OPS) or node.op == "getitem":
            continue
        kernels += 1
        total += _bytes(node) + sum(_bytes(index[r]) for r in set(node.refs()))
    return total, kernels


# How the Coder lays out each convolution's output (``stitch_lsp.coders.conv_layouts``): the Planner notes it.
LayoutAdvisor = Callable[[OpGraph, list[Group], dict[str, OpNode], bool | None], dict[str, ConvLayout]]
# Whether the Coder writes an attention-probabilities node as its kernel (``stitch_lsp.coders.attention_probs``).
ProbsAdvisor = Callable[[OpNode, OpGraph], bool]


def make_plan(task: Task, graph: OpGraph, device: DeviceInfo | None = None, gemm: GemmOptions | None = None,
              channels_last: bool | None = None, layouts: LayoutAdvisor | None = None,
              attention: bool | str = True, probs: ProbsAdvisor | None = None) -> Plan:
    """``gemm``: the template Coder's GEMM options (which GEMMs its Triton family takes, with what tile);
    ``channels_last``: False when every convolution is to run in NCHW; ``layouts``: the Coder's choice of
    each convolution's layout, noted in the plan (None: not noted); ``attention``: False when hand-written
    attention is kept as written (its fused call failed the Verifier), not planned as one library call, and
    "library" when attention is left to PyTorch's kernels; ``probs``: whether the Coder writes attention's
    probabilities alone as its kernel (planned so only while ``attention`` is True)."""
    traced = graph
    graph, taken, attention_misses = fold_attention(simplify(traced)) if attention else (simplify(traced), [], [])
    attention_notes = {m.node: plan_note(m) for m in taken}
    if attention is True and probs is not None:
        graph, folded = fold_attention_probs(graph, probs)
        attention_notes.update(folded)
    graph, _ = fuse_gemms(graph, (gemm or default_options()).choose)
    index = graph.index()
    groups = split(graph)
    bandwidth = (device.copy_bandwidth_gbs if device and device.copy_bandwidth_gbs else H100_COPY_GBS)
    peak = _peak_rate(graph, device)
    plan = Plan(task_key=task.key(), device_name=(device.name if device else "") or "NVIDIA H100 (assumed)",
                bandwidth_gbs=bandwidth, peak_tflops=peak, graph=traced)
    layouts = layouts(graph, groups, index, channels_last) if layouts is not None else {}
    floor_total = 0.0
    eager_gemm_us = 0.0  # the GEMMs as the reference runs them (cuBLAS at ``peak``)
    for group in groups:
        row, gemm_us = _fusion_group(group, index, peak, bandwidth, attention_notes, layouts)
        eager_gemm_us += gemm_us
        plan.groups.append(row)
        plan.bytes_moved += row.bytes_moved
        plan.flops += row.flops
        floor_total += row.floor_us
    plan.floor_us = floor_total
    plan.notes += attention_misses
    _sum_up(plan, traced, groups, index, eager_gemm_us)
    return plan


def _peak_rate(graph: OpGraph, device: DeviceInfo | None) -> float:
    """The rate (TFLOP/s) the reference's GEMMs and the plan's other FLOPs run at."""
    dtype = next((i.dtype for i in graph.inputs if i.role == "input"), "float32")
    if dtype == "float32" and graph.allow_tf32:
        return H100_PEAK_TFLOPS["tf32"]
    if dtype == "float32" and device and device.peak_tflops_fp32:
        return device.peak_tflops_fp32
    return H100_PEAK_TFLOPS.get(dtype, H100_PEAK_TFLOPS["float32"])


def _fusion_group(group: Group, index: dict[str, OpNode], peak: float, bandwidth: float,
                  attention_notes: dict[str, str], layouts: dict[str, ConvLayout]) -> tuple[FusionGroup, float]:
    """One group of the plan with its figures and floor, and what its GEMMs cost the reference (µs)."""
    moved, flops = _group_figures(group, index)
    rate = peak
    eager_gemm_us = 0.0
    family = group.kind == "library" and index[group.nodes[0]].op == GEMM_OP
    if family:
        spec = spec_of(index[group.nodes[0]])
        rate = gemm_family_peak(spec)
        eager_gemm_us += flops / (peak * 1e6)
    elif group.kind == "library":
        eager_gemm_us += flops / (peak * 1e6)
    floor = max(moved / (bandwidth * 1e3), flops / (rate * 1e6)) if (moved or flops) else 0.0
    covered = group.kind != "torch"
    kind = group.kind
    if family:
        kind, note = "gemm", spec.describe() + f"; floor at {rate:.0f} TFLOP/s"
    elif kind == "library":
        kind, note = _library_note(group, index, attention_notes, layouts)
    else:
        note = GROUP_NOTES.get(kind, "")
    return FusionGroup(
        ops=[index[n].op for n in group.nodes], kind=kind,
        inputs=list(group.inputs), outputs=list(group.outputs), bytes_moved=moved, flops=flops,
        floor_us=floor, covered=covered, note=note,
    ), eager_gemm_us


def _library_note(group: Group, index: dict[str, OpNode], attention_notes: dict[str, str],
                  layouts: dict[str, ConvLayout]) -> tuple[str, str]:
    """(kind, note) of a library call's group: which library runs it and why it is one."""
    lib = next(index[n].op for n in group.nodes if library_calls.library_kind(index[n].op))
    kind = library_calls.library_kind(lib) or "gemm"
    note = f"{library_calls.runner(lib)} (library call); what follows it is fused into the next kernel"
    attention_node = next((n for n in group.nodes if n in attention_notes), None)
    if attention_node is not None:
        note = attention_notes[attention_node]
    why = library_calls.why_library(lib)
    note += f" (a library call: {why})" if why else ""
    conv = next((layouts[n] for n in group.nodes if n in layouts), None)
    if conv is not None:
        note += f"; {conv.describe()}"
    return kind, note


def _sum_up(plan: Plan, traced: OpGraph, groups: list[Group], index: dict[str, OpNode], gemm_us: float) -> None:
    """What eager PyTorch moves and launches, the predicted speedup over it, and the plan's closing notes."""
    bandwidth, peak = plan.bandwidth_gbs, plan.peak_tflops
    eager_bytes, eager_kernels = _eager_bytes(traced, traced.index())
    plan.eager_bytes = eager_bytes
    plan.eager_kernels = eager_kernels
    kernels = sum(1 for g in plan.groups if g.kind in KERNEL_KINDS)
    launches = kernels + sum(1 for g in plan.groups if g.kind in LIBRARY_KINDS or g.kind == "torch")
    # Both sides pay a launch per kernel (small tensors are launch-bound, not bandwidth-bound).
    eager_us = max(eager_bytes / (bandwidth * 1e3) + eager_kernels * LAUNCH_US, gemm_us)
    fused_us = plan.floor_us + launches * LAUNCH_US
    if fused_us > 0:
        plan.predicted_speedup = round(max(eager_us, fused_us) / fused_us, 2)
    plan.notes.append(
        f"{len(traced.nodes)} aten ops → {kernels} fused kernel(s)"
        f" + {sum(1 for g in plan.groups if g.kind in LIBRARY_KINDS)} library call(s); eager launches about {eager_kernels}")
    rates = sorted({f"{gemm_family_peak(spec_of(index[g.nodes[0]])):.0f}" for g in groups
                    if g.kind == "library" and index[g.nodes[0]].op == GEMM_OP})
    at = f"{', '.join(rates)} TFLOP/s (tensor cores)" if rates else f"{peak:.0f} TFLOP/s"
    plan.notes.append(
        f"floor {plan.floor_us:.1f} µs ({_fmt_bytes(plan.bytes_moved)} at {bandwidth:.0f} GB/s, "
        f"{plan.flops / 1e9:.2f} GFLOP at {at}); eager moves {_fmt_bytes(eager_bytes)}")


def _fmt_bytes(n: int) -> str:
    if n >= 1 << 30:
        return f"{n / (1 << 30):.2f} GiB"
    if n >= 1 << 20:
        return f"{n / (1 << 20):.1f} MiB"
    return f"{n / 1024:.1f} KiB"


def describe(plan: Plan) -> str:
    """The plan as a few lines of text (progress messages, ``stitch fuse``)."""
    lines = [f"Plan for {plan.device_name}: predicted speedup over eager "
             f"{plan.predicted_speedup if plan.predicted_speedup is not None else '?'}x"]
    for i, g in enumerate(plan.groups):
        if g.kind == "view":
            continue
        ops = ", ".join(op_table.short(o) for o in g.ops
                        if op_table.classify(o, "float32") != "view" or o in op_table.COPYING_VIEW_OPS)
        lines.append(f"  [{i}] {g.kind:<13} {_fmt_bytes(g.bytes_moved):>10} {g.flops / 1e9:8.3f} GFLOP "
                     f"floor {g.floor_us:8.1f} µs  {ops}")
        if g.note:
            lines.append(f"       {g.note}")
    lines += ["  " + n for n in plan.notes]
    return "\n".join(lines)


__all__ = ["make_plan", "describe", "H100_COPY_GBS", "H100_PEAK_TFLOPS"]
_ = math
