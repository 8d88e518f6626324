"""A convolution run in channels-last, and the tail kernel that reads its output in that order.

cuDNN's NHWC (channels-last) convolution kernels ran 1.2-2x faster than its NCHW ones on an H100
(for fp32, much of that is TF32: PyTorch's default ``cudnn.allow_tf32`` lets cuDNN take its TF32
tensor-core kernels in channels-last where it took plain fp32 ones in NCHW; the Verifier judges the
difference), but the reference returns NCHW, and converting the output back with a copy costs more
than the layout gains. So where a convolution's output feeds one pointwise kernel and
nothing else, the convolution runs in channels-last (its input converted per call, its weight once
per weight value, by the binding) and that kernel reads the output through its channels-last layout
and writes NCHW: a block stages a tile of (channels x positions) in shared memory, read along the
channels and written along the positions, so both the read and the write are coalesced.

A reduction tail whose outputs are the same bytes in both layouts (a minimum over the channels, a global
average pool) reads the output in channels-last order as it lies: the group is rewritten in that order
(``conv_reduction``). Tails that would write a full-size output transposed (softmax over the channels, norms)
and pooling keep the convolution in NCHW. ``STITCH_CONV_LAYOUT=nchw`` turns the layout off.
"""

from __future__ import annotations

import os
import re

from stitch_lsp.plan import library_calls
from stitch_lsp.plan.conv_layout import READS_CHANNELS_LAST, ConvLayout
from stitch_lsp.plan.fusion import Group
from stitch_lsp.coders.template.conv_reduction import physical_index
from stitch_lsp.coders.template.cuda_common import PREAMBLE
from stitch_lsp.coders.template.emitter import Unsupported
from stitch_lsp.coders.template.kernels import KernelSpec, _c_type, _finish, _Writer
from stitch_lsp.coders.template.reduction_kernels import COL_THREADS as FULL_GPU_THREADS
from stitch_lsp.coders.template.reductions import reduction_kernels
from stitch_lsp.op_graph import OpGraph, OpNode

ENV = "STITCH_CONV_LAYOUT"  # channels_last (default) | nchw
CONV_OP = "aten.convolution.default"
THREADS = 256
TILE = 1024  # elements a block stages: 4 per thread
FORMATS = {4: "channels_last", 5: "channels_last_3d"}
DTYPES = {"float32", "float16", "bfloat16"}
REDUCTION_KINDS = ("row_reduction", "col_reduction")
TRANSPOSED = "the tail kernel reads it transposed and writes NCHW"
IN_ORDER = "the reduction kernel reads it in that order"


def enabled() -> bool:
    return os.environ.get(ENV, "channels_last").strip().lower() not in ("nchw", "off", "0", "false", "contiguous")


def conv_layouts(graph: OpGraph, groups: list[Group], index: dict[str, OpNode],
                 channels_last: bool | None = None) -> dict[str, ConvLayout]:
    """Each convolution's layout: channels-last where one pointwise kernel alone reads its output and that
    kernel can be written to read it transposed; NCHW otherwise (with the reason)."""
    on = enabled() if channels_last is None else channels_last
    outputs = set(graph.outputs)
    out: dict[str, ConvLayout] = {}
    for group in groups:
        if group.kind != "library":
            continue
        node = next((index[n] for n in group.nodes if library_calls.library_kind(index[n].op) == "conv"), None)
        if node is None:
            continue
        readers = [g for g in groups if node.name in g.inputs]
        layout = _decide(node, readers, outputs, index, on, asked=channels_last is False)
        out[node.name] = layout
    return out


def is_depthwise(node: OpNode, index: dict[str, OpNode]) -> bool:
    """A grouped convolution of one input channel a group."""
    weight = node.args[1] if len(node.args) > 1 else None
    weight = index.get(weight["$"]) if isinstance(weight, dict) and "$" in weight else None
    groups_arg = node.args[8] if len(node.args) > 8 else 1
    return groups_arg != 1 and weight is not None and len(weight.shape) > 1 and weight.shape[1] == 1


def nchw_reason(node: OpNode, outputs: set[str], index: dict[str, OpNode], chained: bool = False) -> str:
    """Why this convolution keeps NCHW whatever reads it ("" where it may run in channels-last); ``chained``:
    between kernels that keep channels-last (``conv_chain``), where a depthwise convolution may too."""
    if node.op != CONV_OP or len(node.shape) not in FORMATS:
        return "only 2-D and 3-D convolutions run in channels-last"
    groups_arg = node.args[8] if len(node.args) > 8 else 1
    # A depthwise convolution (one input channel a group) runs in channels-last inside a chain, its input
    # already in that order: cuDNN's NHWC depthwise kernels, which Inductor's layout choice weighs as it weighs
    # ungrouped ones. Alone it would pay two transposes for a memory-bound convolution with no tensor-core
    # kernel to gain. Groups of several channels ran slower in channels-last by Inductor's measure (1.36x).
    if groups_arg != 1 and not (chained and is_depthwise(node, index)):
        return ("a depthwise convolution runs in channels-last only between kernels that keep that order"
                if is_depthwise(node, index) else "a grouped convolution keeps cuDNN's NCHW kernels")
    if node.dtype not in DTYPES:
        return f"{node.dtype} output"
    if node.name in outputs:
        return "its output is returned"
    return ""


def _decide(node: OpNode, readers: list[Group], outputs: set[str], index: dict[str, OpNode], on: bool,
            asked: bool = False) -> ConvLayout:
    def nchw(why: str) -> ConvLayout:
        return ConvLayout(node.name, "nchw", why)

    if not on:
        # Asked for by the caller: the candidate generated again in NCHW after its channels-last one was refused
        # or slower (the fuse service says which); else the environment.
        return nchw("this candidate was generated in NCHW" if asked else f"{ENV} turns channels-last off")
    why = nchw_reason(node, outputs, index)
    if why:
        return nchw(why)
    if len(readers) != 1:
        return nchw("its output is read by more than one step")
    tail = readers[0]
    if tail.kind == "library":
        return nchw("it feeds another library call, which takes it as NCHW")
    if tail.kind in REDUCTION_KINDS:
        try:
            idle = idles_in_order(tail, index, frozenset([node.name]))
        except Unsupported as exc:
            return nchw(f"it feeds a {tail.kind.replace('_', ' ')} kernel that cannot read it in channels-last: {exc}")
        if idle:
            return nchw(idle)
        return ConvLayout(node.name, FORMATS[len(node.shape)], IN_ORDER, tail.index, node.dtype == "float32")
    if tail.kind != "pointwise":
        return nchw(f"it feeds a {tail.kind.replace('_', ' ')} kernel, which reads its input as NCHW")
    try:
        tail_kernel(tail, index, "stitch_probe", node.name)
    except Unsupported as exc:
        return nchw(f"the tail cannot read it transposed ({exc})")
    return ConvLayout(node.name, FORMATS[len(node.shape)], TRANSPOSED, tail.index, node.dtype == "float32")


def idles_in_order(tail: Group, index: dict[str, OpNode], read: frozenset[str]) -> str:
    """Why reduction group ``tail`` reading ``read`` in channels-last order would leave most of the GPU idle where
    it would fill it reading NCHW ("" where it would not). Few rows lying side by side (a global pool over a small
    batch) take one block for 32 of them; the NCHW kernel splits its long rows across blocks. Raises Unsupported
    where the group cannot read them in that order."""
    ours = _threads_reading(reduction_tail(tail, index, "stitch_probe", read), read)
    if ours >= FULL_GPU_THREADS // 2:
        return ""
    theirs = _threads_reading(reduction_kernels(tail, index, "stitch_probe"), read)
    if theirs < FULL_GPU_THREADS // 2:
        return ""
    return f"in channels-last order its reduction would run {ours} threads, in NCHW {min(theirs, FULL_GPU_THREADS)}"


def _threads_reading(specs: list[KernelSpec], read: frozenset[str]) -> int:
    """Threads the kernels that read any of ``read`` launch (the fewest of them)."""
    return min((s.grid * s.block for s in specs if read & set(s.params)), default=0)


def input_kernel(conv: OpNode, index: dict[str, OpNode], name: str) -> KernelSpec | None:
    """The kernel that writes the convolution's NCHW input in channels-last, for the binding to call before
    the convolution (None where the two layouts are the same bytes): 32 x 32 tiles of (channels x positions)
    through shared memory, read along the positions and written along the channels, both coalesced. The
    values are copied as they are (bits, NaN payloads included)."""
    ref = conv.args[0]
    x = index.get(ref["$"]) if isinstance(ref, dict) and "$" in ref else None
    if x is None or len(x.shape) != len(conv.shape):
        return None
    return transpose_kernel(x, name, to_channels_last=True)


def transpose_kernel(x: OpNode, name: str, to_channels_last: bool) -> KernelSpec | None:
    """A copy of ``x`` between NCHW and channels-last (None where the two are the same bytes): NCHW into
    channels-last (a convolution's input), or back (a chained kernel's output that forward returns, since the
    reference returns NCHW). 32 x 32 tiles of (channels x positions) through shared memory, both sides
    coalesced; the values copied as they are (bits, NaN payloads included)."""
    if x.dtype not in DTYPES or len(x.shape) not in FORMATS:
        return None
    n_img, channels = x.shape[0], x.shape[1]
    positions = x.numel // max(1, n_img * channels)
    if channels == 1 or positions == 1 or x.numel == 0:
        return None
    n_s, n_c = -(-positions // 32), -(-channels // 32)
    ix = "long long" if x.numel >= 2 ** 31 else "int"
    t = _c_type(x.dtype)
    out = f"{name}_out"
    nchw = f"img * {channels * positions} + c * {positions} + s"
    nhwc = f"img * {channels * positions} + s * {channels} + c"
    # The tile is (channels x positions); the NCHW side moves along the positions, the other along the channels.
    read_nchw = f"tile[ty + k][tx] = in0[{nchw}]"
    read_nhwc = f"tile[tx][ty + k] = in0[{nhwc}]"
    write_nhwc = f"out0[{nhwc}] = tile[tx][ty + k]"
    write_nchw = f"out0[{nchw}] = tile[ty + k][tx]"
    first, second = (read_nchw, write_nhwc) if to_channels_last else (read_nhwc, write_nchw)
    # In each pass a warp's 32 threads (tx) run along the side that is contiguous in the array it touches.
    a, b = ("c", "s") if to_channels_last else ("s", "c")
    source = PREAMBLE + f"""
extern "C" __global__ void __launch_bounds__(256) {name}(const {t}* __restrict__ in0, {t}* __restrict__ out0) {{
  __shared__ {t} tile[32][33];
  const {ix} blk = blockIdx.x;
  const {ix} s0 = (blk % {n_s}) * 32, c0 = ((blk / {n_s}) % {n_c}) * 32, img = blk / {n_s * n_c};
  const int tx = threadIdx.x % 32, ty = threadIdx.x / 32;
#pragma unroll
  for (int k = 0; k < 32; k += 8) {{
    const {ix} {a} = {a}0 + ty + k, {b} = {b}0 + tx;
    if (c < {channels} && s < {positions}) {first};
  }}
  __syncthreads();
#pragma unroll
  for (int k = 0; k < 32; k += 8) {{
    const {ix} {b} = {b}0 + ty + k, {a} = {a}0 + tx;
    if (c < {channels} && s < {positions}) {second};
  }}
}}
"""
    fmt = FORMATS[len(x.shape)]
    if to_channels_last:
        shape, layouts = (n_img,) + tuple(x.shape[2:]) + (channels,), {}
        note = (f"{x.name} {list(x.shape)} written in {fmt.replace('_', '-')} through 32x32 shared-memory tiles "
                "for the convolution")
    else:
        shape, layouts = tuple(x.shape), {x.name: fmt}
        note = f"{x.name} {list(x.shape)} written back in NCHW through 32x32 shared-memory tiles, as forward returns it"
    return KernelSpec(name=name, source=source, kind="layout", params=[x.name, out], outputs=[out],
                      grid=n_img * n_s * n_c, block=256, scratch={out: (shape, x.dtype)}, layouts=layouts, note=note)


def tile_shape(channels: int) -> tuple[int, int, int]:
    """(channels, positions, row pitch) of a block's tile: 32 channels (fewer where the convolution has
    fewer), positions to fill TILE elements; the pitch pads the rows so a warp's stores along the channels
    land in distinct banks."""
    tc = 32
    while tc > 1 and tc // 2 >= channels:
        tc //= 2
    ts = TILE // tc
    return tc, ts, ts + 32 // tc


def tail_kernel(group: Group, index: dict[str, OpNode], name: str, conv: str) -> KernelSpec:
    """The pointwise kernel of ``group`` reading ``conv``'s output (N, C, spatial...) in channels-last."""
    src = index[conv]
    n_img, channels = src.shape[0], src.shape[1]
    positions = src.numel // max(1, n_img * channels)
    outs = [index[o] for o in group.outputs]
    if not outs or any(o.numel != src.numel for o in outs):
        raise Unsupported("its outputs are not the convolution's size")
    w = _Writer(group, index, name)
    em = w.em
    tc, ts, pitch = tile_shape(channels)
    per_thread = TILE // THREADS

    def hint(leaf: str, ix: str):
        if leaf != conv:
            return None
        m = re.fullmatch(r"e(\d+)_0", ix)
        if m is None:
            raise Unsupported("the convolution's output is read at another element's index")
        var = em.fresh()
        em.emit(f"const float {var} = stitch_tile[t_a{m.group(1)}][t_b{m.group(1)}];")
        return var

    em.vector_hint = hint
    em.fast_math = True
    em.half_outputs = all(o.dtype in ("bfloat16", "float16") for o in outs)
    em.mark_exact()
    em.indent = "  "
    cs = channels * positions
    for k in range(per_thread):
        # Out-of-range elements of a partial tile compute the tile's first element and store nothing.
        em.emit(f"const int t_j{k} = threadIdx.x + {k * THREADS};")
        em.emit(f"const bool t_ok{k} = t_c0 + t_j{k} / {ts} < {channels}LL && t_s0 + t_j{k} % {ts} < {positions}LL;")
        em.emit(f"const int t_a{k} = t_ok{k} ? t_j{k} / {ts} : 0, t_b{k} = t_ok{k} ? t_j{k} % {ts} : 0;")
        w.declare_chunk(k, f"t_n * {cs}LL + (t_c0 + t_a{k}) * {positions}LL + t_s0 + t_b{k}")
    stores = []
    for k in range(per_thread):
        vals = [em.value(o, f"e{k}_0") for o in group.outputs]
        stores.append(f"  if (t_ok{k}) {{ " + " ".join(
            f"out{i}[c{k}] = stitch_from_float<{_c_type(index[o].dtype)}>({v});"
            for i, (o, v) in enumerate(zip(group.outputs, vals))) + " }")
    n_s, n_c = -(-positions // ts), -(-channels // tc)
    conv_param = w.param_of[conv]
    src_text = PREAMBLE + f"""
extern "C" __global__ void __launch_bounds__({THREADS}) {name}({w.signature()}) {{
  __shared__ float stitch_tile[{tc}][{pitch}];
  const long long t_blk = blockIdx.x;
  const long long t_s0 = (t_blk % {n_s}LL) * {ts}LL;
  const long long t_c0 = ((t_blk / {n_s}LL) % {n_c}LL) * {tc}LL;
  const long long t_n = t_blk / {n_s * n_c}LL;
  // Read along the channels (consecutive in channels-last), one tile row per channel.
#pragma unroll
  for (int k = 0; k < {per_thread}; ++k) {{
    const int j = threadIdx.x + k * {THREADS};
    const long long c = t_c0 + j % {tc}, s = t_s0 + j / {tc};
    stitch_tile[j % {tc}][j / {tc}] = c < {channels}LL && s < {positions}LL
        ? stitch_ld({conv_param}, t_n * {cs}LL + s * {channels}LL + c) : 0.f;
  }}
  __syncthreads();
  // Written along the positions (consecutive in NCHW).
{chr(10).join(em.lines)}
{chr(10).join(stores)}
}}
"""
    src_text = _finish(src_text, group, index)
    grid = max(1, n_img * n_s * n_c)
    return KernelSpec(name=name, source=src_text, kind="pointwise", params=w.leaves + group.outputs,
                      outputs=list(group.outputs), grid=grid, block=THREADS,
                      layouts={conv: FORMATS[len(src.shape)]},
                      note=f"{len(group.nodes)} ops, {src.numel} elements, reads {conv} {READS_CHANNELS_LAST} through "
                           f"{tc}x{ts} shared-memory tiles and writes NCHW")


def reduction_tail(group: Group, index: dict[str, OpNode], name: str, conv: str | frozenset[str],
                   sm: int = 90) -> list[KernelSpec]:
    """The kernels of reduction group ``group`` reading ``conv``'s output (or these channels-last values) in
    channels-last, the group written in that order (``conv_reduction.physical_index``)."""
    read = frozenset([conv]) if isinstance(conv, str) else conv
    specs = reduction_kernels(group, physical_index(group, index, read), name, sm=sm)
    for spec in specs:
        mine = sorted(v for v in read if v in spec.params)
        if mine:
            spec.layouts = {v: FORMATS[len(index[v].shape)] for v in mine}
            spec.note += f"; reads {', '.join(mine)} {READS_CHANNELS_LAST} through its own order (N, spatial, C)"
    return specs
