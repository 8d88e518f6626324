"""The two kernel shapes of the template Coder, written from a fusion group.

* Pointwise: one pass, no loop; each thread takes one or two chunks of VEC elements
  (16-byte loads and stores, about 8 elements a thread), issuing every load before the
  first store. The math takes the cheaper exact-enough forms (op_table.FAST_POINTWISE,
  the softplus / Mish patterns of the emitter) except where a value feeds a comparison.
* Row reduction: one warp or one block per row of the last dimension(s); the row
  is held in registers, so softmax / LayerNorm / RMSNorm and whatever comes
  before and after them read each input once and write each output once.
  Reductions go through warp shuffles (and shared memory across warps) in fp32.

Shapes are the Task's (concrete): sizes are compile-time constants.
"""

from __future__ import annotations

import math
import re

from attrs import define, field

from stitch_lsp.agents import op_table
from stitch_lsp.agents.fusion import Group, reduction_dims
from stitch_lsp.agents.template_coder.cuda_common import PREAMBLE
from stitch_lsp.agents.template_coder.emitter import Emitter, Unsupported
from stitch_lsp.op_graph import OpNode

THREADS = 256
MAX_ROW_ELEMS = 32  # per thread, held in registers


@define
class KernelSpec:
    """One generated kernel and how the binding launches it."""

    name: str
    source: str
    kind: str  # pointwise | row_reduction
    params: list[str] = field(factory=list)  # value names, in parameter order (inputs then outputs)
    outputs: list[str] = field(factory=list)
    grid: int = 1
    block: int = THREADS
    note: str = ""
    bytes_moved: int = 0


def _finish(src: str, group: Group, index: dict[str, OpNode]) -> str:
    """32-bit index arithmetic where every tensor fits (64-bit division is slow); fast math for half outputs."""
    biggest = max([index[n].numel for n in group.nodes] + [index[i].numel for i in group.inputs] + [1])
    head, marker, body = src.partition("extern \"C\"")
    # The parameter list keeps its types (an int64 tensor stays ``long long*``); only the body narrows.
    signature, brace, body = body.partition(") {")
    marker += signature + brace
    if biggest < (1 << 30):
        body = re.sub(r"\b(\d+)LL\b", r"\1", body).replace("long long", "int")
    if all(index[o].dtype in ("bfloat16", "float16") for o in group.outputs):
        # Results are rounded to 8 (bf16) or 11 (fp16) mantissa bits: the approximate units are exact enough.
        body = re.sub(r"\bexpf\(", "__expf(", body)
        body = re.sub(r"\blogf\(", "__logf(", body)
        body = re.sub(r"\btanhf\(", "stitch_tanh_approx(", body)
        body = re.sub(r"\bsinf\(", "__sinf(", body)
        body = re.sub(r"\bcosf\(", "__cosf(", body)
    return head + marker + body


def _c_type(dtype: str) -> str:
    return {"float32": "float", "float16": "__half", "bfloat16": "__nv_bfloat16", "bool": "unsigned char",
            "int64": "long long", "int32": "int"}[dtype]


def _vec_for(dtypes: list[str], n: int) -> int:
    smallest = min((op_table.DTYPE_BYTES.get(d, 4) for d in dtypes), default=4)
    vec = max(1, 16 // max(smallest, 1))
    vec = min(vec, 8)
    while vec > 1 and n % vec:
        vec //= 2
    return vec


class _Writer:
    def __init__(self, group: Group, index: dict[str, OpNode], name: str) -> None:
        self.group = group
        self.index = index
        self.name = name
        self.members = set(group.nodes)
        self.leaves = [i for i in group.inputs]
        for leaf in self.leaves:
            node = index[leaf]
            if node.dtype not in op_table.KERNEL_DTYPES:
                raise Unsupported(f"input {leaf} is {node.dtype}; kernels take float32 / float16 / bfloat16 / bool")
        for out in group.outputs:
            if index[out].dtype not in op_table.KERNEL_DTYPES:
                raise Unsupported(f"output {out} is {index[out].dtype}")
        self.param_of = {leaf: f"in{k}" for k, leaf in enumerate(self.leaves)}
        self.em = Emitter(index, self.members, lambda leaf: self.param_of[leaf])
        used_inside = {r for n in group.nodes for r in index[n].refs() if r in self.members}
        self.em.stored_only = {o for o in group.outputs if o not in used_inside}
        self.vec_loaded: dict[tuple[str, str], list[str]] = {}
        self.chunk_base: dict[str, str] = {}  # element var -> (chunk base var, lane)
        self.elem_of: dict[str, tuple[str, int]] = {}
        self.vec = 1

    def signature(self) -> str:
        params = [f"const {_c_type(self.index[l].dtype)}* __restrict__ {self.param_of[l]}" for l in self.leaves]
        params += [f"{_c_type(self.index[o].dtype)}* __restrict__ out{k}" for k, o in enumerate(self.group.outputs)]
        return ", ".join(params)

    def hint(self, leaf: str, ix: str):
        if self.vec == 1:
            return None
        node = self.index[leaf]
        m = re.fullmatch(r"(e\d+_)(\d+)", ix)
        mod = None
        if m is None:
            m2 = re.fullmatch(r"\(\((e\d+_)(\d+)\) % (\d+)LL\)", ix)
            if m2 is None:
                return self.affine_hint(leaf, ix)
            prefix, lane, mod = m2.group(1), int(m2.group(2)), int(m2.group(3))
            if mod % self.vec or node.numel != mod:
                return None
        else:
            prefix, lane = m.group(1), int(m.group(2))
            if node.numel != self.domain:
                return None
        base = self.chunk_base[prefix]
        key = (leaf, prefix)
        if key not in self.vec_loaded and self.em.depth > self.em.uniform_depth:
            return None
        if key not in self.vec_loaded:
            arr = self.em.fresh("ld")
            start = base if mod is None else f"({base} % {mod}LL)"
            self.em.emit(f"float {arr}[{self.vec}];")
            self.em.emit(f"stitch_ldv<{self.vec}>({self.param_of[leaf]} + {start}, {arr});")
            self.vec_loaded[key] = [f"{arr}[{v}]" for v in range(self.vec)]
        return self.vec_loaded[key][lane]

    def affine_hint(self, leaf: str, ix: str):
        """A vector load where ``ix`` moves in step with the element index across a chunk.

        True when every divisor and modulus in the index is a multiple of VEC (a chunk
        never straddles a row, slice or broadcast boundary) and the chunk's first index
        is VEC-aligned; checked on sampled chunks as well.
        """
        full = self.em.expand(ix)
        elems = set(re.findall(r"\be(\d+)_(\d+)\b", full))
        if len(elems) != 1 or re.search(r"\bi\d+\b|\?|rbase|row", full):
            return None
        (k, lane), = elems
        k, lane = int(k), int(lane)
        if not self.consecutive(full, k, lane):
            return None
        var = f"e{k}_{lane}"
        prefix = f"e{k}_"
        chunk = self.chunk_base[prefix]
        base_c = re.sub(rf"\b{var}\b", chunk, full)
        key = (leaf, prefix + base_c)
        if key not in self.vec_loaded and self.em.depth > self.em.uniform_depth:
            return None  # inside a per-element cat branch: a vector loaded there would serve one lane
        if key not in self.vec_loaded:
            arr = self.em.fresh("ld")
            self.em.emit(f"float {arr}[{self.vec}];")
            self.em.emit(f"stitch_ldv<{self.vec}>({self.param_of[leaf]} + {base_c}, {arr});")
            self.vec_loaded[key] = [f"{arr}[{v}]" for v in range(self.vec)]
        return self.vec_loaded[key][lane]

    def consecutive(self, full: str, k: int, lane: int) -> bool:
        """Index ``full`` (a function of element ``e{k}_{lane}`` only) is VEC-aligned at a chunk's first
        element and steps by one across the chunk: every divisor and modulus is a multiple of VEC, and it
        holds on sampled chunks."""
        for div in re.findall(r"[/%]\s*(\d+)LL", full):
            if int(div) % self.vec:
                return False
        var = f"e{k}_{lane}"
        py = re.sub(r"(\d+)LL", r"\1", full).replace("/", "//")
        try:
            fn = eval(f"lambda {var}: {py}", {"__builtins__": {}})  # noqa: S307 - our own index arithmetic
            step = self.vec
            samples = {0, step, self.domain - step} | {(self.domain // 97 * j) // step * step for j in range(97)}
            for c in samples:
                if c < 0 or c + step > self.domain:
                    continue
                base = fn(c)
                if base % step or any(fn(c + v) != base + v for v in range(step)):
                    return False
        except Exception:
            return False
        return True

    def lanes_of(self, ix: str) -> list[str] | None:
        """The indices of all lanes of ``ix``'s chunk, when they are consecutive and VEC-aligned."""
        if self.vec == 1 or re.search(r"\bi\d+\b|\?|rbase|row", ix):
            return None
        elems = set(re.findall(r"\be(\d+)_(\d+)\b", ix))
        if len(elems) != 1:
            return None
        (k, lane), = elems
        if f"e{k}_" not in self.chunk_base:
            return None
        if ix != f"e{k}_{lane}" and not self.consecutive(ix, int(k), int(lane)):
            return None
        return [re.sub(rf"\be{k}_{lane}\b", f"e{k}_{v}", ix) for v in range(self.vec)]

    def declare_chunk(self, k: int, base_expr: str) -> str:
        base = f"c{k}"
        self.em.emit(f"const long long {base} = {base_expr};")
        prefix = f"e{k}_"
        self.chunk_base[prefix] = base
        for v in range(self.vec):
            self.em.emit(f"[[maybe_unused]] const long long {prefix}{v} = {base} + {v};")
        return prefix

    def store(self, k: int, prefix: str, guard: str) -> list[str]:
        lines = []
        for o_idx, out in enumerate(self.group.outputs):
            vals = [self.em.value(out, f"{prefix}{v}") for v in range(self.vec)]
            arr = self.em.fresh("st")
            lines.append(f"{{ const float {arr}[{self.vec}] = {{{', '.join(vals)}}}; "
                         f"stitch_stv<{self.vec}>(out{o_idx} + c{k}, {arr}); }}")
        if guard:
            return [f"if ({guard}) {{"] + ["  " + l for l in lines] + ["}"]
        return lines


def pointwise_launch(group: Group, index: dict[str, OpNode], nchunk: int, vec: int) -> tuple[int, int]:
    """(threads per block, chunks per thread) for a pointwise kernel of ``nchunk`` VEC-wide chunks.

    One block takes threads x chunks consecutive chunks (no grid-stride loop), so the grid covers the
    tensor once and each SM holds many small blocks, as torch.compile's Triton kernels do. A thread takes
    about 8 elements: one 16-byte chunk of half-precision values, two of fp32 (both chunks' loads issued
    before the first store); a chain with a cat's branches takes one (fewer registers across the branch).
    On the H100, shapes of 128 / 256 threads and 1 / 2 chunks came within 5% of each other on the bench
    tasks, 8 elements a thread ahead for both bf16 (bias + GELU) and fp32 (the activation zoo).
    """
    branches = any(index[n].op == "aten.cat.default" for n in group.nodes)
    per_thread = 1 if branches or vec >= 8 else 2
    while per_thread > 1 and nchunk < 132 * 4 * THREADS * per_thread:
        per_thread //= 2
    return THREADS, per_thread


def pointwise_kernel(group: Group, index: dict[str, OpNode], name: str, threads: int | None = None,
                     per_thread: int | None = None) -> KernelSpec:
    """One pass over the outputs' elements; ``threads`` / ``per_thread`` override ``pointwise_launch``."""
    w = _Writer(group, index, name)
    outs = [index[o] for o in group.outputs]
    domain = max(o.numel for o in outs)
    for o in outs:
        if o.numel != domain:
            raise Unsupported(f"outputs of different sizes ({list(o.shape)} vs {domain} elements)")
    w.domain = domain
    identity = [index[l].dtype for l in w.leaves if index[l].numel == domain] + [o.dtype for o in outs]
    w.vec = _vec_for(identity, domain)
    nchunk = domain // w.vec
    auto_threads, auto_unroll = pointwise_launch(group, index, nchunk, w.vec)
    threads = threads or auto_threads
    unroll = per_thread or auto_unroll
    em = w.em
    em.vector_hint = w.hint
    em.fast_math = True
    em.half_outputs = all(o.dtype in ("bfloat16", "float16") for o in outs)
    em.mark_exact()
    em.chunk_lanes = w.lanes_of
    em.save_loads = lambda: dict(w.vec_loaded)
    em.restore_loads = lambda state: setattr(w, "vec_loaded", state)
    em.indent = "  "
    prefixes = []
    for k in range(unroll):
        if k == 0:
            prefix = w.declare_chunk(0, f"q * {w.vec}LL")
        else:
            em.emit(f"const bool ok{k} = q + {k * threads}LL < {nchunk}LL;")
            prefix = w.declare_chunk(k, f"(ok{k} ? q + {k * threads}LL : q) * {w.vec}LL")
        prefixes.append(prefix)
    body_stores: list[str] = []
    for k, prefix in enumerate(prefixes):
        body_stores += w.store(k, prefix, "" if k == 0 else f"ok{k}")
    body = em.lines + ["  " + l for l in body_stores]
    grid = max(1, math.ceil(nchunk / (threads * unroll)))  # an empty tensor still launches (and returns)
    src = PREAMBLE + f"""
extern "C" __global__ void __launch_bounds__({threads}) {name}({w.signature()}) {{
  const long long q = (long long)blockIdx.x * {threads * unroll}LL + threadIdx.x;
  if (q >= {nchunk}LL) return;
{chr(10).join(body)}
}}
"""
    src = _finish(src, group, index)
    return KernelSpec(name=name, source=src, kind="pointwise", params=w.leaves + group.outputs,
                      outputs=list(group.outputs), grid=grid, block=threads,
                      note=f"{len(group.nodes)} ops, {domain} elements, {w.vec}-wide, {unroll} chunks/thread")


_IDENTITY = {"sum": "0.f", "mean": "0.f", "gather": "0.f", "max": "__int_as_float(0xff800000)",
             "min": "__int_as_float(0x7f800000)", "prod": "1.f"}
_COMBINE = {"sum": "({a} + {b})", "mean": "({a} + {b})", "gather": "({a} + {b})", "max": "stitch_max({a}, {b})",
            "min": "stitch_min({a}, {b})", "prod": "({a} * {b})"}


def row_kernel(group: Group, index: dict[str, OpNode], name: str) -> KernelSpec:
    w = _Writer(group, index, name)
    reductions = [n for n in group.nodes if op_table.classify(index[n].op, index[n].dtype) == "reduction"]
    domain = row_len = None
    for r in reductions:
        dims, src = reduction_dims(index[r], index)
        n = math.prod(src.shape[d] for d in dims)
        if domain is None:
            domain, row_len = src.numel, n
        elif (src.numel, n) != (domain, row_len):
            raise Unsupported("reductions over rows of different lengths in one group")
        if src.name not in w.members and src.name not in group.inputs:
            raise Unsupported("reduction of a value outside the group")
    rows = domain // row_len
    # Which members are per-row values (they depend on a reduction and hold one value per row).
    depends: set[str] = set()
    for n in group.nodes:
        node = index[n]
        if n in reductions or any(r in depends for r in node.refs()):
            depends.add(n)
    row_nodes = set()
    for n in group.nodes:
        if n in depends and index[n].numel != domain:
            if index[n].numel != rows:
                raise Unsupported(f"{n} has {index[n].numel} elements: neither a row nor a row value")
            row_nodes.add(n)
    for o in group.outputs:
        if index[o].numel not in (domain, rows) or (index[o].numel == rows and o not in row_nodes and rows != domain):
            raise Unsupported(f"output {o} is neither a full tensor nor one value per row")
    full_outs = [o for o in group.outputs if o not in row_nodes]
    row_outs = [o for o in group.outputs if o in row_nodes]
    w.domain = domain
    identity = [index[l].dtype for l in w.leaves if index[l].numel == domain] + [index[o].dtype for o in full_outs]
    w.vec = _vec_for(identity or ["float32"], row_len)
    per_row_chunks = math.ceil(row_len / w.vec)
    # A warp per row while a thread holds at most 32 values; else a block, at most 16 values a thread;
    # rows longer than that are streamed in a loop (re-read from L2) instead of held in registers.
    rt = 32
    if math.ceil(per_row_chunks / 32) * w.vec > 32:
        rt = 64
        while rt < 1024 and math.ceil(per_row_chunks / rt) * w.vec > 16:
            rt *= 2
    items = math.ceil(per_row_chunks / rt)
    looped = items * w.vec > MAX_ROW_ELEMS
    block = 256 if rt == 32 else rt
    rows_per_block = block // rt
    em = w.em
    em.vector_hint = w.hint
    em.row_len = row_len
    em.row_nodes = row_nodes
    em.indent = "  "
    em.emit(f"const int lane = threadIdx.x % {rt};")
    em.emit(f"const long long row = (long long)blockIdx.x * {rows_per_block} + threadIdx.x / {rt};")
    if rows_per_block > 1:
        em.emit(f"if (row >= {rows}LL) return;")
    em.emit(f"const long long rbase = row * {row_len}LL;")
    prefixes = []
    guards = []

    def open_loop() -> None:
        # One chunk of VEC per iteration; the memo is scoped to the loop body.
        em.emit("#pragma unroll 4")
        em.emit(f"for (int it = 0; it < {items}; ++it) {{")
        em.indent += "  "
        em.emit(f"const int j0 = (it * {rt} + lane) * {w.vec};")
        if items * rt * w.vec > row_len:
            em.emit(f"if (j0 >= {row_len}) break;")
        em.memo = {}
        w.vec_loaded = {}
        w.declare_chunk(0, "rbase + j0")

    def close_loop() -> None:
        em.indent = em.indent[:-2]
        em.emit("}")
        em.memo = {}
        w.vec_loaded = {}

    if not looped:
        for k in range(items):
            j = f"({k * rt} + lane) * {w.vec}"
            exact = (k + 1) * rt * w.vec <= row_len
            guard = "" if exact else f"j{k} < {row_len}"
            em.emit(f"const int j{k} = {j};")
            prefixes.append(w.declare_chunk(k, f"rbase + ({guard} ? j{k} : 0)" if guard else f"rbase + j{k}"))
            guards.append(guard)
    nred = len(reductions)
    if rt > 32:
        em.emit(f"__shared__ float red[{max(nred, 1)}][32];")
    for r_i, r in enumerate(reductions):
        node = index[r]
        how = op_table.REDUCTION_OPS[node.op]
        dims, src = reduction_dims(node, index)
        acc = em.fresh("acc")
        pick = None
        if how == "gather":
            # Sum of the one element whose position in the row is the index (0 elsewhere): exact.
            pick = em.fresh("pick")
            em.emit(f"const long long {pick} = (long long){em.value(node.args[2]['$'], 'row')};")
        em.emit(f"float {acc} = {_IDENTITY[how]};")

        def element(ix: str) -> str:
            val = em.value(src.name, ix)
            return val if pick is None else f"(({ix} - rbase) == {pick} ? {val} : 0.f)"

        if looped:
            open_loop()
            for v in range(w.vec):
                em.emit(f"{acc} = {_COMBINE[how].format(a=acc, b=element(f'e0_{v}'))};")
            close_loop()
        for k, prefix in enumerate(prefixes):
            for v in range(w.vec):
                val = element(f"{prefix}{v}")
                combined = _COMBINE[how].format(a=acc, b=val)
                em.emit(f"{acc} = {guards[k]} ? {combined} : {acc};" if guards[k] else f"{acc} = {combined};")
        em.emit(f"#pragma unroll")
        em.emit(f"for (int o = {min(rt, 32) // 2}; o > 0; o >>= 1) "
                f"{acc} = {_COMBINE[how].format(a=acc, b=f'__shfl_xor_sync(0xffffffffu, {acc}, o)')};")
        if rt > 32:
            em.emit(f"if ((threadIdx.x & 31) == 0) red[{r_i}][threadIdx.x >> 5] = {acc};")
            em.emit("__syncthreads();")
            em.emit(f"{acc} = red[{r_i}][0];")
            em.emit(f"#pragma unroll")
            em.emit(f"for (int q = 1; q < {rt // 32}; ++q) {acc} = {_COMBINE[how].format(a=acc, b=f'red[{r_i}][q]')};")
        if how == "mean":
            em.emit(f"{acc} *= {op_table.c_float(1.0 / row_len)};")
        if node.dtype != "float32":
            em.emit(f"{acc} = {_round(acc, node.dtype)};")
        em.row_values[r] = acc
    if looped:
        open_loop()
        prefixes, guards = ["e0_"], [""]
    stores: list[str] = []
    group_outputs = group.outputs
    group.outputs = full_outs
    for k, prefix in enumerate(prefixes):
        stores += w.store(k, prefix, guards[k])
    group.outputs = group_outputs
    # Full outputs keep their positions in the parameter list; re-map store targets.
    stores = [_retarget(s, full_outs, group.outputs) for s in stores]
    if looped:
        em.lines += [em.indent + s for s in stores]
        stores = []
        close_loop()
    for o in row_outs:
        val = em.value(o, "row")
        o_idx = group.outputs.index(o)
        stores.append(f"if (lane == 0) out{o_idx}[row] = stitch_from_float<{_c_type(index[o].dtype)}>({val});")
    body = em.lines + ["  " + s for s in stores]
    src = PREAMBLE + f"""
extern "C" __global__ void __launch_bounds__({block}) {name}({w.signature()}) {{
{chr(10).join(body)}
}}
"""
    src = _finish(src, group, index)
    grid = math.ceil(rows / rows_per_block)
    return KernelSpec(name=name, source=src, kind="row_reduction", params=w.leaves + group.outputs,
                      outputs=list(group.outputs), grid=grid, block=block,
                      note=(f"{len(group.nodes)} ops, {rows} rows of {row_len}, "
                            f"{'a warp' if rt == 32 else f'{rt} threads'} per row, {w.vec}-wide"
                            + (", streamed (the row does not fit in registers)" if looped else "")))


def _round(expr: str, dtype: str) -> str:
    if dtype == "bfloat16":
        return f"__bfloat162float(__float2bfloat16_rn({expr}))"
    if dtype == "float16":
        return f"__half2float(__float2half_rn({expr}))"
    return expr


def _retarget(line: str, local: list[str], full: list[str]) -> str:
    """Stores were written with output numbers among ``local``; use numbers among ``full``."""
    def sub(m: re.Match) -> str:
        k = int(m.group(1))
        return f"out{full.index(local[k])} +" if k < len(local) else m.group(0)
    return re.sub(r"out(\d+) \+", sub, line)


COL_SPLIT = 8  # threads of a block that share one column's reduction


def col_kernel(group: Group, index: dict[str, OpNode], name: str) -> KernelSpec:
    """Reductions over a middle dimension: x[O, R, I] -> y[O, I], a thread per (o, i) column.

    Consecutive threads take consecutive columns (coalesced loads); each column's R
    elements are split over ``COL_SPLIT`` threads and combined through shared memory.
    """
    w = _Writer(group, index, name)
    reductions = [n for n in group.nodes if op_table.classify(index[n].op, index[n].dtype) == "reduction"]
    first_dims, first_src = reduction_dims(index[reductions[0]], index)
    shape = first_src.shape
    for r in reductions:
        dims, src = reduction_dims(index[r], index)
        if dims != first_dims or src.shape != shape:
            raise Unsupported("middle-dimension reductions over different dimensions in one group")
    if first_dims != list(range(first_dims[0], first_dims[-1] + 1)):
        raise Unsupported("reduction over dimensions that are not adjacent")
    d0, d1 = first_dims[0], first_dims[-1]
    outer, red, inner = math.prod(shape[:d0]), math.prod(shape[d0:d1 + 1]), math.prod(shape[d1 + 1:])
    domain, cols = math.prod(shape), math.prod(shape[:d0]) * math.prod(shape[d1 + 1:])
    depends: set[str] = set()
    for n in group.nodes:
        if n in reductions or any(r in depends for r in index[n].refs()):
            depends.add(n)
    row_nodes = {n for n in depends}
    for n in depends:
        if index[n].numel != cols:
            raise Unsupported(f"{n} mixes reduced and unreduced values (only epilogues on the result are fused)")
    for o in group.outputs:
        if o not in row_nodes:
            raise Unsupported(f"output {o} is not a reduced value")
    em = w.em
    em.row_len = red
    em.row_nodes = row_nodes
    em.indent = "  "
    w.vec = 1
    w.domain = domain
    em.emit(f"const long long row = (long long)blockIdx.x * 32 + (threadIdx.x & 31);")
    em.emit(f"const int ty = threadIdx.x >> 5;")
    em.emit(f"const bool live = row < {cols}LL;")
    em.emit(f"const long long o = (live ? row : 0) / {inner}LL, i = (live ? row : 0) % {inner}LL;")
    em.emit(f"__shared__ float part[{max(len(reductions), 1)}][{COL_SPLIT}][32];")
    for r_i, r in enumerate(reductions):
        node = index[r]
        how = op_table.REDUCTION_OPS[node.op]
        dims, src = reduction_dims(node, index)
        acc = em.fresh("acc")
        em.emit(f"float {acc} = {_IDENTITY[how]};")
        em.emit("#pragma unroll 4")
        em.emit(f"for (long long r = ty; r < {red}LL; r += {COL_SPLIT}) {{")
        em.indent += "  "
        em.memo = {}
        em.emit(f"[[maybe_unused]] const long long e0_0 = (o * {red}LL + r) * {inner}LL + i;")
        val = em.value(src.name, "e0_0")
        em.emit(f"{acc} = {_COMBINE[how].format(a=acc, b=val)};")
        em.indent = em.indent[:-2]
        em.emit("}")
        em.memo = {}
        em.emit(f"part[{r_i}][ty][threadIdx.x & 31] = {acc};")
        em.emit("__syncthreads();")
        em.emit(f"{acc} = part[{r_i}][0][threadIdx.x & 31];")
        em.emit("#pragma unroll")
        em.emit(f"for (int q = 1; q < {COL_SPLIT}; ++q) {acc} = {_COMBINE[how].format(a=acc, b=f'part[{r_i}][q][threadIdx.x & 31]')};")
        if how == "mean":
            em.emit(f"{acc} *= {op_table.c_float(1.0 / red)};")
        if node.dtype != "float32":
            em.emit(f"{acc} = {_round(acc, node.dtype)};")
        em.row_values[r] = acc
    em.emit("if (ty != 0 || !live) return;")
    for o_idx, o in enumerate(group.outputs):
        val = em.value(o, "row")
        em.emit(f"out{o_idx}[row] = stitch_from_float<{_c_type(index[o].dtype)}>({val});")
    block = 32 * COL_SPLIT
    src = PREAMBLE + f"""
extern "C" __global__ void __launch_bounds__({block}) {name}({w.signature()}) {{
{chr(10).join(em.lines)}
}}
"""
    src = _finish(src, group, index)
    return KernelSpec(name=name, source=src, kind="col_reduction", params=w.leaves + group.outputs,
                      outputs=list(group.outputs), grid=math.ceil(cols / 32), block=block,
                      note=f"{len(group.nodes)} ops, {cols} columns of {red} (stride {inner}), {COL_SPLIT} threads per column")
