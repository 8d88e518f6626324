"""Attention as one kernel of our own: softmax(q·kᵀ·scale [+ causal mask])·v, one pass over the keys.

Where it is written: a ``scaled_dot_product_attention`` node (forward's own call, or hand-written
attention the plan folded into one) over 4-D (batch, heads, sequence, head size) tensors with the
same batch and heads, no ``attn_mask``, no dropout, head sizes a multiple of 4 up to 128, in float32 (and
in bfloat16 / float16 for attention written by hand). Anything else stays PyTorch's fused attention (a
library call).

Why a kernel of our own: at the sizes people run in an editor (a few heads, a few hundred
positions) PyTorch's fp32 attention is its memory-efficient kernel, 64 query rows a block, so a
GPT block's attention fills a quarter of an H100's SMs and takes longer than the two GEMMs and the
softmax it replaces. This kernel takes 16 to 64 query rows a block, as many as fill the GPU, and
computes in fp32 with fp32 products (no TF32), so it is at least as close to the float64 answer as
eager. Whether it beats PyTorch's on the user's GPU is measured when the candidate is verified:
``fuse.fallbacks`` tries the library call when this one is not faster than ``torch.compile``.

The algorithm is the online softmax of FlashAttention: a block holds its query rows, walks the keys
64 at a time (stopping at the diagonal under a causal mask), keeps each row's running maximum and
sum, and rescales its output accumulator as the maximum grows. 128 threads: 8 row groups of 16
threads; a thread holds ``rows`` query rows, 4 keys of each tile (16 apart, so the 16 threads of a
row read distinct banks) and 4 adjacent output columns in each 64 of them. Scores are taken to
base 2 (``exp2``) with ``scale·log2 e`` folded into them. Under a causal mask, a key past a row is
left out of both products: NaN or Inf in v beyond the mask does not reach the output, as in
PyTorch's fused attention.
"""

from __future__ import annotations

import math

from stitch_lsp.coders.template.cuda_common import PREAMBLE
from stitch_lsp.coders.template.emitter import Unsupported
from stitch_lsp.coders.template.kernels import KernelSpec, _c_type
from stitch_lsp.coders.template.values.index_maps import contiguous_strides
from stitch_lsp.coders.template.attention.view_layout import hint as _hint, in_place_layout
from stitch_lsp.op_graph import OpGraph, OpNode

THREADS = 128
KEYS = 64  # keys a tile
MAX_HEAD = 128
FILL_SMS = 132  # an H100 SXM / H200: blocks to reach before taking more query rows a block
_DTYPES = ("float32", "bfloat16", "float16")
_LOG2E = 1.4426950408889634


def query_rows(heads: int, queries: int) -> int:
    """Query rows a block: the most (64, 32, 16) that still gives the GPU a block per SM, and no more than
    the queries need (down to 8: a transformer run over a batch of 2 as its sequence has 2 queries a head)."""
    rows = next((r for r in (64, 32) if heads * -(-queries // r) >= FILL_SMS), 16)
    while rows > 8 and rows >= 2 * queries:
        rows //= 2
    return rows


def shared_bytes(rows: int, d: int, dv: int) -> int:
    """Dynamic shared memory a block takes: its queries, a tile of keys (rows padded by 4 floats so the
    16 threads of a row group read distinct banks), a tile of values, and the tile's probabilities."""
    return 4 * (rows * d + KEYS * (d + 4) + KEYS * dv + rows * (KEYS + 4))


def _read_in_place(shape: tuple[int, ...], strides: tuple[int, ...]) -> bool:
    """Whether q, k or v can be read at these strides: rows of contiguous elements, each row and head
    starting at a multiple of 4 elements (the kernel's 16-byte loads of fp32, 8-byte of bf16 / fp16)."""
    return len(strides) == 4 and strides[3] == 1 and all(s % 4 == 0 or d == 1 for s, d in zip(strides[:3], shape))


class Operands:
    """Where the kernel reads q, k and v (or q and k): each in place through its views where ``view_layout``
    finds its base and its rows are contiguous (``in_place``: ref -> (base, element offset, strides)), else
    row-major as the binding passes it; with forward's own inputs at the strides they were traced with."""

    def __init__(self, refs: list[str], index: dict[str, OpNode], graph: OpGraph | None) -> None:
        self.index = index
        self.in_place: dict[str, tuple[str, int, tuple[int, ...]]] = {}
        for ref in refs if graph is not None else ():
            base, offset, st = in_place_layout(ref, index, graph)
            if (base != ref or st != tuple(contiguous_strides(index[ref].shape))) and offset % 4 == 0 \
                    and _read_in_place(index[ref].shape, st):
                self.in_place[ref] = (base, offset, st)
        traced = {i.name: tuple(i.strides) for i in graph.inputs if i.strides} if graph is not None else {}
        self.bases = [self.in_place[r][0] if r in self.in_place else r for r in refs]
        self.strided = {b: list(traced[b]) for b in self.bases if b in traced}

    def layout(self, ref: str, rows: int, width: int) -> str:
        """The element offset, then the elements between batches, heads and rows, as the kernel's C array."""
        if ref in self.in_place:
            _, offset, st = self.in_place[ref]
            return ", ".join(map(str, (offset, *st[:3])))
        heads = self.index[ref].shape[1]
        return ", ".join(map(str, (0, heads * rows * width, rows * width, width)))


def attention_kernel(node: OpNode, index: dict[str, OpNode], name: str, graph: OpGraph | None = None,
                     written: bool = False) -> KernelSpec:
    """The kernel for one ``scaled_dot_product_attention`` node; ``Unsupported`` says why not. With the
    ``graph``, a q, k or v that is a view (heads split from a projection and transposed, or forward's input
    at its traced strides) is read in place where its rows are contiguous (``view_layout``), where a
    row-major kernel would need the binding to copy it first. ``written``: the node stands for attention
    written out by hand (``softmax(masked scores) @ v``), whose NaN or Inf in v at a masked key still reaches
    the row (its probability 0 times v): the kernel keeps that, where PyTorch's fused attention leaves masked
    keys out."""
    args = node.args
    refs = [a.get("$") if isinstance(a, dict) else None for a in args[:3]]
    if len(args) < 3 or None in refs:
        raise Unsupported("attention without q, k and v tensors")
    q, k, v = (index[r] for r in refs)
    mask = args[3] if len(args) > 3 else None
    dropout = _hint(args[4]) if len(args) > 4 else 0.0
    causal = bool(args[5]) if len(args) > 5 else False
    kwargs = node.kwargs
    if mask is not None:
        raise Unsupported("an attention mask tensor (only is_causal is written)")
    if dropout not in (0, 0.0, None):
        raise Unsupported("dropout inside attention")
    if kwargs.get("enable_gqa"):
        raise Unsupported("grouped-query attention")
    if any(len(t.shape) != 4 for t in (q, k, v)):
        raise Unsupported("q, k and v are not 4-D")
    (b, h, tq, d), (bk, hk, tk, dk), (bv, hv, tv, dv) = q.shape, k.shape, v.shape
    if (b, h) != (bk, hk) or (b, h) != (bv, hv) or tk != tv or dk != d:
        raise Unsupported("q, k and v differ in batch, heads, keys or head size")
    if d % 4 or dv % 4 or d > MAX_HEAD or dv > MAX_HEAD or min(tq, tk, d, dv) < 1:
        raise Unsupported(f"head sizes {d} and {dv} (the kernel takes multiples of 4 up to {MAX_HEAD})")
    if len({q.dtype, k.dtype, v.dtype, node.dtype}) != 1 or node.dtype not in _DTYPES:
        raise Unsupported(f"attention in {q.dtype} / {k.dtype} / {v.dtype}")
    if node.dtype != "float32" and not written:
        # Measured on an H100 (bench/results/attention_kernel_h100_20261207): FlashAttention's tensor cores run
        # bf16 attention 2 to 20 times faster than these fp32 products. Attention written by hand is still taken:
        # its NaN / Inf at masked keys are the written code's, which PyTorch's fused attention does not keep.
        raise Unsupported(f"{node.dtype} attention call: PyTorch's FlashAttention (tensor cores) is faster")
    if tuple(node.shape) != (b, h, tq, dv):
        raise Unsupported("the attention's output is not (batch, heads, queries, value size)")
    scale = _hint(kwargs.get("scale"))
    scale = 1.0 / math.sqrt(d) if scale is None else float(scale)
    heads = b * h
    rows = query_rows(heads, tq)
    tiles = -(-tq // rows)
    if heads * tiles >= 2 ** 31:
        raise Unsupported("too many query tiles for one launch")
    shared = shared_bytes(rows, d, dv)
    ctype = _c_type(node.dtype)
    operands = Operands(refs, index, graph)
    layout = operands.layout
    source = PREAMBLE + TILE_HELPERS + _SOURCE.format(
        name=name, T=ctype, TQ=tq, TK=tk, D=d, DV=dv, ROWS=rows, TILES=tiles,
        CAUSAL="true" if causal else "false", SCALE=repr(float(scale * _LOG2E)),
        KEYS=KEYS, THREADS=THREADS, FLOATS=shared // 4, H=h,
        QS=layout(refs[0], tq, d), KS=layout(refs[1], tk, d),
        VS=layout(refs[2], tk, dv), LEAK="true" if written and causal else "false")
    out = node.name
    flops = 2 * heads * tq * tk * (d + dv) // (2 if causal else 1)
    read = [n for r, n in zip(refs, "qkv") if r in operands.in_place]
    note = (f"attention kernel of our own: {b}x{h} heads, {tq} queries x {tk} keys, head size {d}"
            f"{'' if dv == d else f' (values {dv})'}, scale {scale:.6g}{', causal' if causal else ''}, "
            f"{node.dtype} in, fp32 softmax and products; {rows} query rows a block, {heads * tiles} blocks "
            f"({flops / 1e6:.0f} MFLOP)")
    if read:
        note += f"; reads {', '.join(read)} in place through their views (no copy first)"
    if written and causal:
        note += "; NaN or Inf in v at a masked key reaches the row, as in the written code"
    moved = sum(t.numel * (4 if t.dtype == "float32" else 2) for t in (q, k, v, node))
    return KernelSpec(name=name, source=source, kind="attention", params=[*operands.bases, out],
                      outputs=[out], grid=heads * tiles, block=THREADS, note=note, bytes_moved=moved, shared=shared,
                      strided=operands.strided)


# Device helpers both attention kernels share (plain CUDA, not a format string).
TILE_HELPERS = r"""
// Rows first .. first + n of a (rows, W) operand at `stride` elements a row (zeros from row `limit` on) into
// shared memory at W + PAD floats a row, 4 elements a thread at a time.
template <typename T, int W, int PAD, int THREADS>
__device__ __forceinline__ void stitch_load_rows(const T* __restrict__ src, long long stride, int first, int n,
                                                 int limit, float* dst, int tid) {
  for (int i = tid * 4; i < n * W; i += THREADS * 4) {
    const int r = i / W, c = i % W;
    float x[4] = {0.f, 0.f, 0.f, 0.f};
    if (first + r < limit) stitch_ldv<4>(src + (long long)(first + r) * stride + c, x);
    *reinterpret_cast<float4*>(dst + r * (W + PAD) + c) = make_float4(x[0], x[1], x[2], x[3]);
  }
}

// The unscaled scores of a thread's R query rows (row group tr, D floats a row in qs) and its 4 keys of a tile
// (tc + 16 j, KD floats a row in ks), in fp32 products.
template <int R, int D, int KD>
__device__ __forceinline__ void stitch_tile_scores(const float* qs, const float* ks, int tr, int tc, float (&s)[R][4]) {
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int j = 0; j < 4; ++j) s[r][j] = 0.f;
#pragma unroll
  for (int d = 0; d < D; d += 4) {
    float4 kv[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) kv[j] = *reinterpret_cast<const float4*>(ks + (tc + 16 * j) * KD + d);
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const float4 qv = *reinterpret_cast<const float4*>(qs + (tr * R + r) * D + d);
#pragma unroll
      for (int j = 0; j < 4; ++j)
        s[r][j] = fmaf(qv.x, kv[j].x, fmaf(qv.y, kv[j].y, fmaf(qv.z, kv[j].z, fmaf(qv.w, kv[j].w, s[r][j]))));
    }
  }
}
"""


# One block: ROWS query rows of one (batch, head). Shapes are the task's: every bound is a constant.
_SOURCE = r"""
extern "C" __global__ void __launch_bounds__({THREADS}) {name}(const {T}* __restrict__ q, const {T}* __restrict__ k,
                                                 const {T}* __restrict__ v, {T}* __restrict__ out) {{
  constexpr int TQ = {TQ}, TK = {TK}, D = {D}, DV = {DV}, ROWS = {ROWS}, TILES = {TILES}, KEYS = {KEYS};
  constexpr int R = ROWS / 8;                      // query rows a thread
  constexpr int NC = (DV + 63) / 64;               // 4-column chunks a thread holds, 64 columns apart
  constexpr int KD = D + 4, PD = KEYS + 4;         // padded row lengths of the key and probability tiles
  constexpr bool CAUSAL = {CAUSAL};
  constexpr bool LEAK = {LEAK};                    // attention as written: 0 * v of a masked key still adds
  constexpr float SCALE = {SCALE}f;                // scale * log2(e): scores in base 2
  const float NEG_INF = __int_as_float(0xff800000);  // NVRTC has no math.h, so no INFINITY
  STITCH_HELD(qs, {FLOATS});
  float* ks = qs + ROWS * D;
  float* vs = ks + KEYS * KD;
  float* ps = vs + KEYS * DV;
  const int tid = threadIdx.x, tr = tid >> 4, tc = tid & 15;
  const int head = blockIdx.x / TILES;
  const int q0 = (TILES - 1 - (int)(blockIdx.x % TILES)) * ROWS;   // the longest rows (causal) start first
  // Where q, k and v lie in what the kernel is given: an element offset, then the elements between batches,
  // heads and rows (row-major, or through the views that made them from a projection or forward's input).
  constexpr long long QB[4] = {{{QS}}}, KB[4] = {{{KS}}}, VB[4] = {{{VS}}};
  const int bi = head / {H}, hi = head % {H};
  const {T}* qh = q + QB[0] + bi * QB[1] + hi * QB[2];
  const {T}* kh = k + KB[0] + bi * KB[1] + hi * KB[2];
  const {T}* vh = v + VB[0] + bi * VB[1] + hi * VB[2];

  stitch_load_rows<{T}, D, 0, {THREADS}>(qh, QB[3], q0, ROWS, TQ, qs, tid);

  float m[R], l[R], acc[R][NC][4];
#pragma unroll
  for (int r = 0; r < R; ++r) {{
    m[r] = NEG_INF; l[r] = 0.f;
#pragma unroll
    for (int c = 0; c < NC; ++c)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[r][c][e] = 0.f;
  }}

  const int kend = CAUSAL ? min(TK, q0 + ROWS) : TK;
  for (int k0 = 0; k0 < kend; k0 += KEYS) {{
    __syncthreads();  // the tile before is read
    stitch_load_rows<{T}, D, 4, {THREADS}>(kh, KB[3], k0, KEYS, TK, ks, tid);
    stitch_load_rows<{T}, DV, 0, {THREADS}>(vh, VB[3], k0, KEYS, TK, vs, tid);
    __syncthreads();

    float s[R][4];
    stitch_tile_scores<R, D, KD>(qs, ks, tr, tc, s);

#pragma unroll
    for (int r = 0; r < R; ++r) {{
      const int row = q0 + tr * R + r;
      float mx = NEG_INF;
#pragma unroll
      for (int j = 0; j < 4; ++j) {{
        const int key = k0 + tc + 16 * j;
        const bool keep = key < TK && (!CAUSAL || key <= row);
        s[r][j] = keep ? s[r][j] * SCALE : NEG_INF;
        mx = fmaxf(mx, s[r][j]);
      }}
#pragma unroll
      for (int o = 8; o; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
      const float mn = fmaxf(m[r], mx);
      const float base = mn == NEG_INF ? 0.f : mn;   // a row with no key kept yet: nothing to rescale
      const float alpha = exp2f(m[r] - base);
      float sum = 0.f;
#pragma unroll
      for (int j = 0; j < 4; ++j) {{
        const float p = exp2f(s[r][j] - base);
        ps[(tr * R + r) * PD + tc + 16 * j] = p;
        sum += p;
      }}
#pragma unroll
      for (int o = 8; o; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
      l[r] = l[r] * alpha + sum;
      m[r] = mn;
#pragma unroll
      for (int c = 0; c < NC; ++c)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[r][c][e] *= alpha;
    }}
    __syncthreads();

    // Under a causal mask, only the tile on the diagonal has keys past some of its rows.
    const bool diagonal = CAUSAL && k0 + KEYS - 1 > q0;
    const int kn = min(KEYS, TK - k0);
#pragma unroll 2
    for (int kk = 0; kk < kn; kk += 4) {{
      float4 vv[4][NC];
#pragma unroll
      for (int e = 0; e < 4; ++e)
#pragma unroll
        for (int c = 0; c < NC; ++c)
          vv[e][c] = 4 * tc + 64 * c < DV ? *reinterpret_cast<const float4*>(vs + (kk + e) * DV + 4 * tc + 64 * c)
           : make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
      for (int r = 0; r < R; ++r) {{
        const float4 p4 = *reinterpret_cast<const float4*>(ps + (tr * R + r) * PD + kk);
        const int row = q0 + tr * R + r;
#pragma unroll
        for (int e = 0; e < 4; ++e) {{
          if (!LEAK && diagonal && k0 + kk + e > row) continue;   // masked: v there is never read into the sum
          if (kk + e >= kn) continue;
          const float pv = e == 0 ? p4.x : e == 1 ? p4.y : e == 2 ? p4.z : p4.w;
#pragma unroll
          for (int c = 0; c < NC; ++c) {{
            acc[r][c][0] = fmaf(pv, vv[e][c].x, acc[r][c][0]);
            acc[r][c][1] = fmaf(pv, vv[e][c].y, acc[r][c][1]);
            acc[r][c][2] = fmaf(pv, vv[e][c].z, acc[r][c][2]);
            acc[r][c][3] = fmaf(pv, vv[e][c].w, acc[r][c][3]);
          }}
        }}
      }}
    }}
  }}

  if (LEAK) {{
    // Keys past the last tile read are masked for every row here; as written, 0 * v of each still adds, so a NaN
    // or Inf there makes the column NaN. The 8 row groups share the keys; a column's flag is set in shared memory.
    int* bad = reinterpret_cast<int*>(ps);
    __syncthreads();
    for (int c = tid; c < DV; c += {THREADS}) bad[c] = 0;
    __syncthreads();
    const float POS_INF = __int_as_float(0x7f800000);
    for (int j = (kend + KEYS - 1) / KEYS * KEYS + tr; j < TK; j += 8) {{
#pragma unroll
      for (int c = 0; c < NC; ++c) {{
        const int col = 4 * tc + 64 * c;
        if (col >= DV) continue;
        float x[4];
        stitch_ldv<4>(vh + (long long)j * VB[3] + col, x);
#pragma unroll
        for (int e = 0; e < 4; ++e)
          if (!(fabsf(x[e]) < POS_INF)) bad[col + e] = 1;
      }}
    }}
    __syncthreads();
#pragma unroll
    for (int c = 0; c < NC; ++c)
#pragma unroll
      for (int e = 0; e < 4; ++e)
        if (4 * tc + 64 * c + e < DV && bad[4 * tc + 64 * c + e])
#pragma unroll
          for (int r = 0; r < R; ++r) acc[r][c][e] = __int_as_float(0x7fc00000);
  }}

#pragma unroll
  for (int r = 0; r < R; ++r) {{
    const int row = q0 + tr * R + r;
    if (row >= TQ) continue;
#pragma unroll
    for (int c = 0; c < NC; ++c) {{
      const int col = 4 * tc + 64 * c;
      if (col >= DV) continue;
      float y[4] = {{acc[r][c][0] / l[r], acc[r][c][1] / l[r], acc[r][c][2] / l[r], acc[r][c][3] / l[r]}};
      stitch_stv<4>(out + ((long long)head * TQ + row) * DV + col, y);
    }}
  }}
}}
"""
