"""Attention's probabilities alone as one kernel: softmax(q·kᵀ·scale [+ causal mask]), written once.

Where it is written: a ``stitch.attention_probs`` node (``plan.attention.fold_attention_probs``), the
softmax of a scores GEMM whose probabilities are returned or read besides a second GEMM (nanoGPT's
manual attention selected up to the softmax, attention weights a module also returns). As written,
that is a batched GEMM into a (batch, heads, queries, keys) scores tensor, with q and k copied first
where they are views of a projection, then a softmax kernel that reads the scores back. This kernel
reads q and k in place through their views, keeps the scores on chip and writes only the probabilities.

One pass where a head's keys fit in shared memory and a row's scores in a row group's registers (up to
64 a thread, with fewer query rows a block if that is what makes them fit): the keys are read once, the
scores computed once in fp32 products, and each row's maximum, sum and probabilities taken from registers.
Otherwise two passes over the keys, so that any number of keys fits: the first computes each row's maximum
and sum (the online softmax of ``kernel.py``), the second computes the scores again and writes
``exp(s - max) / sum`` a tile at a time, through shared memory so that each row's 64 keys leave as whole
16-byte stores. (Measured on an H100 at nanoGPT's size, the two-pass form ran at 0.85x ``torch.compile``:
``bench/results/models_fuse_h100_20261207/probs_kernel/``; the one-pass form is what runs there now.)

Exactness is the written code's: the same scores (fp32 products; eager's cuBLAS fp32 GEMM, TF32 where the
reference allows it), the mask replaces a masked score by -inf, NaN or ±Inf among a row's kept scores make
the whole row NaN as ``exp(x - amax(x)) / sum`` does, and a masked entry is exactly 0 otherwise.
"""

from __future__ import annotations

import math

from stitch_lsp.coders.template.attention.kernel import (KEYS, MAX_HEAD, THREADS, TILE_HELPERS, Operands,
                                                          query_rows)
from stitch_lsp.coders.template.attention.view_layout import hint as _hint
from stitch_lsp.coders.template.cuda_common import PREAMBLE
from stitch_lsp.coders.template.emitter import Unsupported
from stitch_lsp.coders.template.kernels import KernelSpec, _c_type
from stitch_lsp.op_graph import OpGraph, OpNode

_DTYPES = ("float32", "bfloat16", "float16")
_LOG2E = 1.4426950408889634


ONE_PASS_SHARED = 160 * 1024  # bytes: a block's queries and all its keys, within Hopper's 227 KB a block
ONE_PASS_SCORES = 64  # scores a thread may hold in registers (its rows x a row's keys / 16) without spilling


def one_pass(rows: int, tk: int, d: int) -> bool:
    """Whether a block holds every key of its head in shared memory and a row's scores in registers (its 16
    threads, a sixteenth each): then the keys are read once and the scores computed once."""
    return (rows // 8) * -(-tk // 16) <= ONE_PASS_SCORES and shared_bytes(rows, tk, d) <= ONE_PASS_SHARED


def shared_bytes(rows: int, tk: int, d: int, single: bool = True) -> int:
    """One pass: a block's queries and all keys (rounded up to 16; rows padded by 4 floats, so that a row
    group's 16 threads read distinct banks). Two passes: its queries, a tile of keys and a tile of
    probabilities staged for the store."""
    if single:
        return 4 * (rows * d + 16 * -(-tk // 16) * (d + 4))
    return 4 * (rows * d + KEYS * (d + 4) + rows * (KEYS + 4))


def takes(node: OpNode, graph: OpGraph) -> bool:
    """Whether the kernel writes this ``stitch.attention_probs`` node (the fold asks before it folds)."""
    try:
        probs_kernel(node, graph.index(), "probe", graph)
    except Unsupported:
        return False
    return True


def probs_kernel(node: OpNode, index: dict[str, OpNode], name: str, graph: OpGraph | None = None) -> KernelSpec:
    """The kernel for one ``stitch.attention_probs`` node (args q, k, causal; kwarg scale); ``Unsupported``
    says why not."""
    args = node.args
    refs = [a.get("$") if isinstance(a, dict) else None for a in args[:2]]
    if len(args) < 3 or None in refs or any(r not in index for r in refs):
        raise Unsupported("attention probabilities without q and k tensors")
    q, k = (index[r] for r in refs)
    causal = bool(args[2])
    if len(q.shape) != 4 or len(k.shape) != 4:
        raise Unsupported("q and k are not 4-D")
    (b, h, tq, d), (bk, hk, tk, dk) = q.shape, k.shape
    if (b, h, d) != (bk, hk, dk) or tuple(node.shape) != (b, h, tq, tk) or (causal and tq != tk):
        raise Unsupported("q and k differ in batch, heads or head size, or the probabilities' shape is not theirs")
    if d % 4 or d > MAX_HEAD or min(tq, tk, d) < 1:
        raise Unsupported(f"head size {d} (the kernel takes multiples of 4 up to {MAX_HEAD})")
    if len({q.dtype, k.dtype, node.dtype}) != 1 or node.dtype not in _DTYPES:
        raise Unsupported(f"attention probabilities in {q.dtype} / {k.dtype}")
    scale = _hint(node.kwargs.get("scale"))
    scale = 1.0 if scale is None else float(scale)
    if not math.isfinite(scale) or scale == 0:
        raise Unsupported(f"scale {scale}")
    heads = b * h
    rows = query_rows(heads, tq)
    # One pass wherever a row's scores fit a thread's registers, with fewer query rows a block if need be: more
    # blocks then read the same keys (from L2), which costs less than computing every score twice.
    single = next((r for r in (rows, rows // 2, rows // 4) if r >= 8 and one_pass(r, tk, d)), 0)
    rows = single or rows
    tiles = -(-tq // rows)
    if heads * tiles >= 2 ** 31 or heads * tq * tk >= 2 ** 62:
        raise Unsupported("too many query tiles for one launch")
    shared = shared_bytes(rows, tk, d, bool(single))
    operands = Operands(refs, index, graph)
    source = PREAMBLE + TILE_HELPERS + _SOURCE.format(
        name=name, T=_c_type(node.dtype), TQ=tq, TK=tk, D=d, ROWS=rows, TILES=tiles,
        CAUSAL="true" if causal else "false", SCALE=repr(float(scale * _LOG2E)),
        KEYS=KEYS, THREADS=THREADS, FLOATS=shared // 4, H=h,
        ONE_PASS="true" if single else "false",
        QS=operands.layout(refs[0], tq, d), KS=operands.layout(refs[1], tk, d))
    flops = (1 if single else 2) * 2 * heads * tq * tk * d // (2 if causal else 1)
    how = ("one pass: each block holds its head's keys in shared memory and a row's scores in registers"
           if single else "two passes over the keys, the scores computed twice")
    note = (f"attention probabilities, a kernel of our own: {b}x{h} heads, {tq} queries x {tk} keys, head size {d}, "
            f"scale {scale:.6g}{', causal' if causal else ''}, {node.dtype} in and out, fp32 scores and softmax; "
            f"{rows} query rows a block, {heads * tiles} blocks; {how} ({flops / 1e6:.0f} MFLOP), never written")
    read = [n for r, n in zip(refs, "qk") if r in operands.in_place]
    if read:
        note += f"; reads {' and '.join(read)} in place through their views (no copy first)"
    size = 4 if node.dtype == "float32" else 2
    moved = size * (q.numel + k.numel + node.numel)
    return KernelSpec(name=name, source=source, kind="attention", params=[*operands.bases, node.name],
                      outputs=[node.name], grid=heads * tiles, block=THREADS, note=note, bytes_moved=moved,
                      shared=shared, strided=operands.strided)


# One block: ROWS query rows of one (batch, head); 8 row groups of 16 threads, a thread holding R rows and 4 keys of
# each 64 (16 apart). Shapes are the task's: every bound is a constant.
_SOURCE = r"""
extern "C" __global__ void __launch_bounds__({THREADS}) {name}(const {T}* __restrict__ q, const {T}* __restrict__ k,
                                                 {T}* __restrict__ out) {{
  constexpr int TQ = {TQ}, TK = {TK}, D = {D}, ROWS = {ROWS}, TILES = {TILES}, KEYS = {KEYS};
  constexpr int R = ROWS / 8;
  constexpr int KD = D + 4, PD = KEYS + 4;
  constexpr bool CAUSAL = {CAUSAL};
  constexpr float SCALE = {SCALE}f;                // scale * log2(e): scores in base 2
  const float NEG_INF = __int_as_float(0xff800000);
  STITCH_HELD(qs, {FLOATS});
  float* ks = qs + ROWS * D;
  float* ps = ks + KEYS * KD;
  const int tid = threadIdx.x, tr = tid >> 4, tc = tid & 15;
  const int head = blockIdx.x / TILES;
  const int q0 = (TILES - 1 - (int)(blockIdx.x % TILES)) * ROWS;   // the longest rows (causal) start first
  constexpr long long QB[4] = {{{QS}}}, KB[4] = {{{KS}}};
  const int bi = head / {H}, hi = head % {H};
  const {T}* qh = q + QB[0] + bi * QB[1] + hi * QB[2];
  const {T}* kh = k + KB[0] + bi * KB[1] + hi * KB[2];
  {T}* oh = out + (long long)head * TQ * TK;

  stitch_load_rows<{T}, D, 0, {THREADS}>(qh, QB[3], q0, ROWS, TQ, qs, tid);

  const int kend = CAUSAL ? min(TK, q0 + ROWS) : TK;
  if constexpr ({ONE_PASS}) {{
    // Every key the block's rows keep, in shared memory at once (one round of loads), then each thread's scores
    // for keys tc + 16 j in registers: the keys are read and the scores computed once.
    constexpr int NJ = (TK + 15) / 16;
    const int kr = min(16 * NJ, (kend + 15) / 16 * 16);
    stitch_load_rows<{T}, D, 4, {THREADS}>(kh, KB[3], 0, kr, TK, qs + ROWS * D, tid);
    __syncthreads();
    const float* kall = qs + ROWS * D;
    float s[R][NJ];
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
      for (int j = 0; j < NJ; ++j) s[r][j] = 0.f;
#pragma unroll 4
    for (int d = 0; d < D; d += 4) {{
      float4 qv[R];
#pragma unroll
      for (int r = 0; r < R; ++r) qv[r] = *reinterpret_cast<const float4*>(qs + (tr * R + r) * D + d);
#pragma unroll
      for (int j = 0; j < NJ; ++j) {{
        if (16 * j >= kend) continue;   // past every kept key of the block (the same for its 128 threads)
        const float4 kv = *reinterpret_cast<const float4*>(kall + (tc + 16 * j) * KD + d);
#pragma unroll
        for (int r = 0; r < R; ++r)
          s[r][j] = fmaf(qv[r].x, kv.x, fmaf(qv[r].y, kv.y, fmaf(qv[r].z, kv.z, fmaf(qv[r].w, kv.w, s[r][j]))));
      }}
    }}
#pragma unroll
    for (int r = 0; r < R; ++r) {{
      const int row = q0 + tr * R + r;
      float mx = NEG_INF;
#pragma unroll
      for (int j = 0; j < NJ; ++j) {{
        const int key = tc + 16 * j;
        s[r][j] = key < TK && (!CAUSAL || key <= row) ? s[r][j] * SCALE : NEG_INF;
        mx = fmaxf(mx, s[r][j]);
      }}
#pragma unroll
      for (int o = 8; o; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
      float sum = 0.f;
#pragma unroll
      for (int j = 0; j < NJ; ++j) sum += exp2f(s[r][j] - mx);   // NaN or +Inf among the scores: a NaN sum
#pragma unroll
      for (int o = 8; o; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
      if (row >= TQ) continue;
#pragma unroll
      for (int j = 0; j < NJ; ++j) {{
        const int key = tc + 16 * j;   // a row's 16 threads store 16 adjacent keys
        const float p = exp2f(s[r][j] - mx) / sum;
        if (key < TK) stitch_stv<1>(oh + (long long)row * TK + key, &p);
      }}
    }}
    return;
  }}

  float m[R], l[R];
#pragma unroll
  for (int r = 0; r < R; ++r) {{ m[r] = NEG_INF; l[r] = 0.f; }}
  float s[R][4];

  // s[r][j]: the base-2 score of row tr * R + r and key k0 + tc + 16 j, -inf where masked.
  auto scores = [&](int k0) {{
    __syncthreads();  // the tile before is read
    stitch_load_rows<{T}, D, 4, {THREADS}>(kh, KB[3], k0, KEYS, TK, ks, tid);
    __syncthreads();
    stitch_tile_scores<R, D, KD>(qs, ks, tr, tc, s);
#pragma unroll
    for (int r = 0; r < R; ++r) {{
      const int row = q0 + tr * R + r;
#pragma unroll
      for (int j = 0; j < 4; ++j) {{
        const int key = k0 + tc + 16 * j;
        s[r][j] = key < TK && (!CAUSAL || key <= row) ? s[r][j] * SCALE : NEG_INF;
      }}
    }}
  }};

  // Pass 1: each row's maximum and the sum of exp2(s - max), online. A NaN or +Inf score makes the sum NaN, so the
  // whole row comes out NaN, as exp(x - amax(x)) / sum(...) has it.
  for (int k0 = 0; k0 < kend; k0 += KEYS) {{
    scores(k0);
#pragma unroll
    for (int r = 0; r < R; ++r) {{
      float mx = NEG_INF;
#pragma unroll
      for (int j = 0; j < 4; ++j) mx = fmaxf(mx, s[r][j]);
#pragma unroll
      for (int o = 8; o; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
      const float mn = fmaxf(m[r], mx);
      const float base = mn == NEG_INF ? 0.f : mn;   // no finite score yet: nothing to rescale
      float sum = 0.f;
#pragma unroll
      for (int j = 0; j < 4; ++j) sum += exp2f(s[r][j] - base);
#pragma unroll
      for (int o = 8; o; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
      l[r] = l[r] * exp2f(m[r] - base) + sum;
      m[r] = mn;
    }}
  }}

  // Pass 2: the probabilities, a tile of 64 keys at a time, staged in shared memory and stored a row's 4 keys a
  // thread. Past the last tile with a kept key every entry is exp(-inf - max) / sum: 0, or NaN in a NaN row.
  float zero[R];
#pragma unroll
  for (int r = 0; r < R; ++r) zero[r] = exp2f(NEG_INF - m[r]) / l[r];
  for (int k0 = 0; k0 < TK; k0 += KEYS) {{
    if (k0 < kend) {{
      scores(k0);
#pragma unroll
      for (int r = 0; r < R; ++r)
#pragma unroll
        for (int j = 0; j < 4; ++j) ps[(tr * R + r) * PD + tc + 16 * j] = exp2f(s[r][j] - m[r]) / l[r];
    }} else {{
      __syncthreads();  // the tile before is stored
#pragma unroll
      for (int r = 0; r < R; ++r)
#pragma unroll
        for (int j = 0; j < 4; ++j) ps[(tr * R + r) * PD + tc + 16 * j] = zero[r];
    }}
    __syncthreads();
    for (int i = tid * 4; i < ROWS * KEYS; i += {THREADS} * 4) {{
      const int r = i / KEYS, c = i % KEYS, row = q0 + r, key = k0 + c;
      if (row >= TQ || key >= TK) continue;
      const float* p = ps + r * PD + c;
      {T}* o = oh + (long long)row * TK + key;
      if (TK % 4 == 0) {{
        float y[4] = {{p[0], p[1], p[2], p[3]}};
        stitch_stv<4>(o, y);
      }} else {{
        for (int e = 0; e < 4 && key + e < TK; ++e) stitch_stv<1>(o + e, p + e);
      }}
    }}
  }}
}}
"""
