"""Running sums and products (``cumsum`` / ``cumprod``) with the pointwise work before and after them.

* Along the row (the scanned dimension is the last): a warp per row walks it in chunks, each lane
  holding a run of neighbouring elements. The arithmetic is eager PyTorch's own, to the last
  association: chunks as long as eager's CUDA scan takes (``eager_chunk``), the running value of
  the chunks before combined into a chunk's first element, then a Sklansky scan of the chunk (at
  each level the upper half of every group takes the last value of its lower half), in registers
  and through warp shuffles instead of shared memory and barriers. So the results equal eager's,
  bit for bit, with NaN / Inf / underflow landing where eager's do (a cumulative product of a row
  that underflows before an Inf is NaN from there in both). Each element is read and written once.
* Across columns (the scanned dimension is not the last): neighbouring threads take neighbouring
  rows, each walks its row in order with a running value (eager's order too), every load
  coalesced across the warp.

The prologue (a mask, a flip, a scale) is computed where the scan reads its source; the epilogue,
where each element's result is stored, from that element's running value (an epilogue that reads
the scan at another element, a flip of the result say, runs as a separate kernel).
"""

from __future__ import annotations

import math
import re

from stitch_lsp.agents import op_table
from stitch_lsp.agents.fusion import Group, domain, reduction_dims
from stitch_lsp.agents.template_coder.cuda_common import PREAMBLE
from stitch_lsp.agents.template_coder.emitter import Unsupported
from stitch_lsp.agents.template_coder.kernels import KernelSpec, _c_type, _finish, _Writer
from stitch_lsp.op_graph import OpNode

SCAN_THREADS = 256  # a thread a row (scans of a middle dimension)
_IDENTITY = {"sum": "0.f", "prod": "1.f"}
_OP = {"sum": "+", "prod": "*"}


def scan_kernel(group: Group, index: dict[str, OpNode], name: str) -> KernelSpec:
    scans = [n for n in group.nodes if op_table.classify(index[n].op, index[n].dtype) == "scan"]
    if len(scans) != 1 or any(op_table.classify(index[n].op, index[n].dtype) == "reduction" for n in group.nodes):
        raise Unsupported("a scan shares its kernel with no other scan or reduction")
    scan = index[scans[0]]
    how = op_table.SCAN_OPS[scan.op]
    if scan.kwargs.get("dtype") not in (None, {"$dtype": scan.dtype}):
        raise Unsupported("a scan that changes the dtype")
    dims, src = reduction_dims(scan, index)
    dom = domain(scan, index)
    for o in group.outputs:
        if index[o].numel != dom.numel:
            raise Unsupported(f"output {o} is not the size of the scan")
    w = _Writer(group, index, name)
    w.domain = dom.numel
    em = w.em
    em.fast_math = True
    em.half_outputs = all(index[o].dtype in ("bfloat16", "float16") for o in group.outputs)
    em.mark_exact()
    em.indent = "  "
    rows, row_len = dom.rows, dom.row_len
    op = _OP[how]
    if dom.layout == "rows":
        # The association of eager's own scan (see the module's docstring), so the two agree to the last bit.
        chunk = eager_chunk(rows, row_len)
        k = chunk // 32  # consecutive elements a lane holds
        vec = k if row_len % k == 0 else 1
        w.vec = vec
        em.vector_hint = w.hint if vec > 1 else (lambda leaf, ix: None)
        block = 256
        em.emit(f"const long long row = (long long)blockIdx.x * {block // 32} + (threadIdx.x >> 5);")
        em.emit("const int lane = threadIdx.x & 31;")
        em.emit(f"if (row >= {rows}LL) return;")
        em.emit(f"float carry = {_IDENTITY[how]};")
        em.emit(f"for (int cb = 0; cb < {row_len}; cb += {chunk}) {{")
        em.indent += "  "
        em.emit(f"const int j = cb + lane * {k};")
        em.memo = {}
        w.vec_loaded = {}
        if vec > 1:
            em.emit(f"const bool ok = j < {row_len};")
            prefix = w.declare_chunk(0, f"row * {row_len}LL + (ok ? j : 0)")
            ixs = [f"{prefix}{e}" for e in range(k)]
            oks = ["ok"] * k
        else:
            ixs, oks = [], []
            for e in range(k):
                em.emit(f"const bool ok{e} = j + {e} < {row_len};")
                em.emit(f"[[maybe_unused]] const long long e{e}_0 = row * {row_len}LL + (ok{e} ? j + {e} : 0);")
                ixs.append(f"e{e}_0")
                oks.append(f"ok{e}")
        x = [em.fresh("x") for _ in range(k)]
        for e in range(k):
            em.emit(f"float {x[e]} = {oks[e]} ? {em.value(src.name, ixs[e])} : {_IDENTITY[how]};")
        # The chunk's first element takes the running value of the chunks before.
        em.emit(f"if (lane == 0) {x[0]} = {x[0]} {op} carry;")
        level = 0
        while (1 << level) < chunk:  # Sklansky: the upper half of each 2s-group takes the lower half's last
            step = 1 << level
            if step < k:  # both halves in this lane's registers
                for e in range(k):
                    if e & step:
                        em.emit(f"{x[e]} = {x[e]} {op} {x[((e >> (level + 1)) << (level + 1)) + step - 1]};")
            else:
                lanes = step // k
                em.emit(f"{{ const float t = __shfl_sync(0xffffffffu, {x[k - 1]}, "
                        f"((lane / {2 * lanes}) * {2 * lanes}) + {lanes - 1});")
                em.emit(f"  if (lane & {lanes}) {{ {' '.join(f'{v} = {v} {op} t;' for v in x)} }} }}")
            level += 1
        em.emit(f"carry = __shfl_sync(0xffffffffu, {x[k - 1]}, 31);")
        for e in range(k):
            em.memo[(scan.name, ixs[e])] = _rounded(em, x[e], scan.dtype)
        for o_idx, o in enumerate(group.outputs):
            vals = [em.value(o, ix) for ix in ixs]
            ctype = _c_type(index[o].dtype)
            if vec > 1:
                arr = em.fresh("st")
                em.emit(f"if (ok) {{ const float {arr}[{k}] = {{{', '.join(vals)}}}; "
                        f"stitch_stv<{k}>(out{o_idx} + c0, {arr}); }}")
            else:
                for e in range(k):
                    em.emit(f"if ({oks[e]}) out{o_idx}[e{e}_0] = stitch_from_float<{ctype}>({vals[e]});")
        em.indent = em.indent[:-2]
        em.emit("}")
        grid = math.ceil(rows / (block // 32))
        note = (f"{len(group.nodes)} ops, {rows} rows of {row_len}, a warp a row, chunks of {chunk} "
                f"({k} a lane) scanned as eager scans them")
    else:
        w.vec = 1
        em.emit(f"const long long r = (long long)blockIdx.x * {SCAN_THREADS} + threadIdx.x;")
        em.emit(f"if (r >= {rows}LL) return;")
        em.emit(f"float carry = {_IDENTITY[how]};")
        em.emit(f"for (int j = 0; j < {row_len}; ++j) {{")
        em.indent += "  "
        em.memo = {}
        w.vec_loaded = {}
        w.declare_chunk(0, dom.element("r", "j"))
        em.emit(f"carry = carry {op} {em.value(src.name, 'e0_0')};")
        em.memo[(scan.name, "e0_0")] = _rounded(em, "carry", scan.dtype, copy=True)
        for o_idx, o in enumerate(group.outputs):
            em.emit(f"out{o_idx}[c0] = stitch_from_float<{_c_type(index[o].dtype)}>({em.value(o, 'e0_0')});")
        em.indent = em.indent[:-2]
        em.emit("}")
        block, grid = SCAN_THREADS, math.ceil(rows / SCAN_THREADS)
        note = f"{len(group.nodes)} ops, {rows} rows of {row_len} (stride {dom.inner}), a thread a row, in order"
    src_text = PREAMBLE + f"""
extern "C" __global__ void __launch_bounds__({block}) {name}({w.signature()}) {{
{chr(10).join(em.lines)}
}}
"""
    src_text = re.sub(r"(?<![\w.])expf\(", "__expf(", src_text)
    src_text = _finish(src_text, group, index)
    return KernelSpec(name=name, source=src_text, kind="scan", params=w.leaves + group.outputs,
                      outputs=list(group.outputs), grid=grid, block=block, note=note)


def eager_chunk(rows: int, row_len: int) -> int:
    """The elements eager PyTorch's CUDA scan of the last dimension takes at a time: twice its threads per row,
    a power of two from 32 to 1024 set by the ratio of row length to row count (in 32-bit unsigned
    arithmetic, whose wrap-around it keeps)."""
    lx = ly = 0
    while (1 << lx) < row_len:
        lx += 1
    while (1 << ly) < rows:
        ly += 1
    log_x = ((9 + ((lx - ly) & 0xFFFFFFFF)) & 0xFFFFFFFF) // 2
    return 2 << min(max(4, log_x), 9)


def _rounded(em, var: str, dtype: str, copy: bool = False) -> str:
    """The running value as eager stores it (rounded to a half dtype); ``copy``: into a fresh variable."""
    if dtype in ("bfloat16", "float16"):
        out = em.fresh("r")
        fn = "__bfloat162float(__float2bfloat16_rn" if dtype == "bfloat16" else "__half2float(__float2half_rn"
        em.emit(f"const float {out} = {fn}({var}));")
        return out
    if copy:
        out = em.fresh("r")
        em.emit(f"const float {out} = {var};")
        return out
    return var
