"""The kernel shapes of the template Coder, written from a fusion group.

* Pointwise: one pass, no loop; each thread takes one or two chunks of VEC elements
  (16-byte loads and stores, about 8 elements a thread), issuing every load before the
  first store. The math takes the cheaper exact-enough forms (op_table.FAST_POINTWISE,
  the softplus / Mish patterns of the emitter) except where a value feeds a comparison.
* Row reduction: a warp or part of a block per row of the last dimension(s)
  (``row_config``); the row is held in registers, so softmax / LayerNorm / RMSNorm
  and whatever comes before and after them read each input once and write each
  output once. Reductions that do not depend on one another share a pass and a
  barrier; a mean and the variance around it are one pass (per-thread sums around
  the thread's own first value, merged with Chan's formula as offsets from the row's
  first value). Rows too long for registers (GroupNorm) are streamed: statistics in
  one pass, outputs in a second that walks the row backwards to find it in L2.
  Everything reduces in fp32 through warp shuffles, then shared memory across warps.
* Column reduction (a middle dimension): a thread takes VEC adjacent columns, each
  column's reduction split over 8 to 32 threads and combined in shared memory.

Shapes are the Task's (concrete): sizes are compile-time constants.
"""

from __future__ import annotations

import math
import re

from attrs import define, field

from stitch_lsp.agents import op_table
from stitch_lsp.agents.fusion import Group, reduction_dims
from stitch_lsp.agents.template_coder.cuda_common import PREAMBLE
from stitch_lsp.agents.template_coder.emitter import Emitter, Unsupported, _round_to as _round
from stitch_lsp.op_graph import OpNode

THREADS = 256
MAX_ROW_ELEMS = 32  # per thread, held in registers
CHUNKS_PER_THREAD = 4  # 16-byte chunks a row kernel's thread holds, where the row is long enough


@define
class KernelSpec:
    """One generated kernel and how the binding launches it."""

    name: str
    source: str
    kind: str  # pointwise | row_reduction | col_reduction | gemm
    params: list[str] = field(factory=list)  # value names, in parameter order (inputs then outputs)
    outputs: list[str] = field(factory=list)
    grid: int = 1
    block: int = THREADS
    note: str = ""
    bytes_moved: int = 0
    backend: str = "nvrtc"  # nvrtc: CUDA C++ source; triton: a Python module with one @triton.jit kernel
    # Triton launches: the constexpr arguments (the tile), num_warps, num_stages; and the name of the
    # tuple value a kernel of several outputs stands for (its outputs are read through getitem).
    meta: dict[str, int] = field(factory=dict)
    tuple_name: str = ""


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
    def __init__(self, group: Group, index: dict[str, OpNode], name: str, emitter: type[Emitter] = Emitter) -> None:
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
        self.em = emitter(index, self.members, lambda leaf: self.param_of[leaf])
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
                return self.affine_hint(leaf, ix) or self.uniform_hint(leaf, ix)
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

    def uniform_hint(self, leaf: str, ix: str):
        """One load for a whole chunk where ``ix`` is the same for all its elements.

        True when the element index enters ``ix`` only divided by multiples of VEC (a
        per-channel weight read at ``(e / HW) % C``): a VEC-aligned chunk never
        straddles such a boundary.
        """
        full = self.em.expand(ix)
        elems = set(re.findall(r"\be(\d+)_(\d+)\b", full))
        if len(elems) != 1 or re.search(r"\bi\d+\b|\?|rbase|row", full):
            return None
        (k, lane), = elems
        var = f"e{k}_{lane}"
        uses = re.findall(rf"\b{var}\b(\)*)( / (\d+)LL)?", full)
        if not uses or any(not div or int(div) % self.vec for _, _, div in uses):
            return None
        prefix = f"e{k}_"
        base_c = re.sub(rf"\b{var}\b", self.chunk_base[prefix], full)
        key = (leaf, "uniform " + base_c)
        if key not in self.vec_loaded and self.em.depth > self.em.uniform_depth:
            return None  # inside a per-element cat branch: a load there would not outlive it
        if key not in self.vec_loaded:
            val = self.em.fresh("u")
            self.em.emit(f"const float {val} = stitch_ld({self.param_of[leaf]}, {base_c});")
            self.vec_loaded[key] = [val]
        return self.vec_loaded[key][0]

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
_COMBINE = {"sum": "({a} + {b})", "mean": "({a} + {b})", "gather": "({a} + {b})", "max": "stitch_max_nan({a}, {b})",
            "min": "stitch_min_nan({a}, {b})", "prod": "({a} * {b})"}


class _RowEmitter(Emitter):
    """An Emitter that remembers which variables hold one value per row (they are loop-invariant)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.row_vars: set[str] = set()

    def value(self, name: str, ix: str) -> str:
        out = super().value(name, ix)
        if ix == "row":
            self.row_vars.add(out)
        return out


@define
class RowConfig:
    """How a row kernel maps rows to threads."""

    threads: int  # threads per row: 32 (a warp) or a power of two up to 1024 (part of a block, or all of it)
    block: int  # threads per block, a multiple of ``threads``
    streamed: bool  # loop over the row once per pass (re-read from L2) instead of holding it in registers
    # Ask L2 for the row one wave ahead while this one is reduced (a block that holds a long row in
    # registers is often alone on its SM). Off by default: on an H100 it gained nothing for
    # cross-entropy (32000 bf16) and cost 15% for logsumexp (32000 fp32).
    prefetch: bool = False


def row_config(row_len: int, vec: int, rows: int, inputs: int = 1) -> RowConfig:
    """A warp per row while a lane holds at most 32 values; else part of a block (or all of it).

    With one full-size input a thread holds CHUNKS_PER_THREAD chunks of 16 bytes (bf16
    RMSNorm: 128 threads a 4096 row; logsumexp: 512 a 16384 row); with several, at most 16
    values (each value is then several loads). Both measured on an H100 (bench/row_kernel_sweep.py).
    Rows that need more than 32 values a thread at 1024 threads are streamed: statistics
    in one pass, outputs in a second that reads the row back (mostly from L2).
    """
    chunks = math.ceil(row_len / vec)
    if math.ceil(chunks / 32) * vec <= MAX_ROW_ELEMS:
        return RowConfig(32, 256, False)
    rt = 64
    if inputs <= 1:
        while rt < 1024 and math.ceil(chunks / rt) > CHUNKS_PER_THREAD:
            rt *= 2
    else:
        while rt < 1024 and math.ceil(chunks / rt) * vec > 16:
            rt *= 2
    streamed = math.ceil(chunks / rt) * vec > MAX_ROW_ELEMS
    return RowConfig(rt, max(rt, 256), streamed)


def _variance_pairs(reductions: list[str], index: dict[str, OpNode]) -> dict[str, str]:
    """``{r2: r1}`` where r1 = mean(s) and r2 = mean or sum of (s - r1)^2 over the same rows.

    Such a pair is computed in one pass, as (count, mean, M2) per thread merged across the row.
    """
    def ref(arg) -> str | None:
        return arg["$"] if isinstance(arg, dict) and "$" in arg else None

    def through_views(name: str | None) -> str | None:
        while name is not None:
            node = index[name]
            if node.op in ("aten.view.default", "aten.reshape.default", "aten.alias.default",
                           "aten.unsqueeze.default", "aten.squeeze.dim", "aten.squeeze.dims") and \
                    index[ref(node.args[0])].numel == node.numel:
                name = ref(node.args[0])
                continue
            return name
        return None

    pairs: dict[str, str] = {}
    for r2 in reductions:
        n2 = index[r2]
        if op_table.REDUCTION_OPS.get(n2.op) not in ("sum", "mean"):
            continue
        _, sq = reduction_dims(n2, index)
        if sq.op == "aten.mul.Tensor" and ref(sq.args[0]) and ref(sq.args[0]) == ref(sq.args[1]):
            diff = index[ref(sq.args[0])]
        elif sq.op == "aten.pow.Tensor_Scalar" and ref(sq.args[0]) and sq.args[1] == 2:
            diff = index[ref(sq.args[0])]
        else:
            continue
        if diff.op != "aten.sub.Tensor" or len(diff.args) > 2 or diff.kwargs.get("alpha", 1) != 1:
            continue
        r1 = through_views(ref(diff.args[1]))
        if r1 not in reductions or r1 in pairs or op_table.REDUCTION_OPS.get(index[r1].op) != "mean":
            continue
        dims1, src1 = reduction_dims(index[r1], index)
        dims2, _ = reduction_dims(n2, index)
        if src1.name != ref(diff.args[0]) or dims1 != dims2 or src1.shape != sq.shape or index[r1].dtype != "float32":
            continue
        pairs[r2] = r1
    return pairs


def row_kernel(group: Group, index: dict[str, OpNode], name: str, config: RowConfig | None = None) -> KernelSpec:
    w = _Writer(group, index, name, emitter=_RowEmitter)
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
    depends: dict[str, set[str]] = {}  # member -> the reductions it depends on
    for n in group.nodes:
        node = index[n]
        deps = set().union(*(depends.get(r, set()) for r in node.refs()))
        if n in reductions:
            deps = deps | {n}
        if deps:
            depends[n] = deps
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
    vec = w.vec
    nch = row_len // vec  # chunks of VEC per row (VEC divides the row)
    full_inputs = sum(1 for l in w.leaves if index[l].numel == domain)
    cfg = config or row_config(row_len, vec, rows, full_inputs)
    rt, block, looped = cfg.threads, cfg.block, cfg.streamed
    if rt < 32 or rt & (rt - 1) or block % rt or block > 1024:
        raise ValueError(f"bad row config {cfg}")
    items = math.ceil(nch / rt)
    rows_per_block = block // rt
    partial = rows_per_block < 1 or rows % rows_per_block != 0  # the last block has rows past the end
    em = w.em
    em.vector_hint = w.hint
    em.row_len = row_len
    # The pointwise kernels' cheaper forms (2-ulp divides, one-instruction clamps, SiLU / sigmoid without
    # the IEEE division's slow path) for the prologue and epilogue; values that feed a comparison stay exact.
    em.fast_math = True
    em.half_outputs = all(index[o].dtype in ("bfloat16", "float16") for o in group.outputs)
    em.mark_exact()
    em.row_nodes = row_nodes
    em.indent = "  "
    em.emit(f"const int lane = threadIdx.x % {rt};")
    if rows_per_block > 1:
        em.emit(f"const long long row0 = (long long)blockIdx.x * {rows_per_block} + threadIdx.x / {rt};")
        if partial:
            # Threads past the last row work on the last row (they take part in barriers) and store nothing.
            em.emit(f"const bool live = row0 < {rows}LL;")
            em.emit(f"const long long row = live ? row0 : {rows - 1}LL;")
        else:
            em.emit("const long long row = row0;")
    else:
        em.emit("const long long row = (long long)blockIdx.x;")
    em.emit(f"const long long rbase = row * {row_len}LL;")
    prefixes: list[str] = []
    guards: list[str] = []

    def open_loop(reverse: bool = False) -> None:
        # One chunk of VEC per iteration; the memo is scoped to the loop body.
        em.emit("#pragma unroll 4")
        if reverse:
            # The output pass walks the row backwards: the chunks read last in the statistics pass
            # are the likeliest still in L2.
            em.emit(f"for (int it = {items - 1}; it >= 0; --it) {{")
        else:
            em.emit(f"for (int it = 0; it < {items}; ++it) {{")
        em.indent += "  "
        em.emit(f"const int j0 = (it * {rt} + lane) * {vec};")
        if items * rt > nch:
            em.emit(f"if (j0 >= {row_len}) {'continue' if reverse else 'break'};")
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
            j = f"({k * rt} + lane) * {vec}"
            exact = (k + 1) * rt <= nch
            guard = "" if exact else f"j{k} < {row_len}"
            em.emit(f"const int j{k} = {j};")
            prefixes.append(w.declare_chunk(k, f"rbase + ({guard} ? j{k} : 0)" if guard else f"rbase + j{k}"))
            guards.append(guard)
        full_leaves = [l for l in w.leaves if index[l].numel == domain]
        if cfg.prefetch and full_leaves:
            em.emit(f"const int pf = stitch_nsm() * {rows_per_block};  // rows one wave ahead")
            em.emit(f"if (row + pf < {rows}LL) {{")
            for leaf in full_leaves:
                for k in range(items):
                    em.emit(f"  stitch_prefetch_l2({w.param_of[leaf]} + c{k} + (long long)pf * {row_len}LL);")
            em.emit("}")

    # Passes: reductions that do not depend on one another share a pass (one loop over a streamed
    # row, one barrier); a mean and the variance around it share one as well.
    pairs = _variance_pairs(reductions, index)
    passes: list[list[str]] = []
    for r in reductions:
        if r in pairs:
            continue
        deps = depends.get(r, set()) - {r}
        # A reduction's value may feed another's source only through a later pass.
        if passes and not any(d in passes[-1] or pairs.get(d) in passes[-1] for d in deps):
            passes[-1].append(r)
        else:
            passes.append([r])
    var_of = {r1: r2 for r2, r1 in pairs.items()}
    slots = sum(1 + 2 * (r in var_of) for p in passes for r in p)
    warps_per_row = rt // 32
    if warps_per_row > 1:
        em.emit(f"__shared__ float red[{slots}][{block // 32}];")
    slot = 0
    cnt = f"{items * vec}.f" if nch % rt == 0 else f"(float)(lane < {nch} ? (({nch - 1} - lane) / {rt} + 1) * {vec} : 0)"

    for rpass in passes:
        accs: dict[str, str] = {}
        moments: dict[str, tuple[str, ...]] = {}  # r1 -> (shift, origin, s1, s2)
        picks: dict[str, str] = {}
        if any(r in var_of for r in rpass):
            # The one-pass variance sums around the thread's first value (the shift); means travel
            # as offsets from the row's first value (the origin), so merging them loses nothing
            # to a large common offset.
            em.emit(f"const long long kr{slot} = rbase;")
            if looped:
                em.emit(f"const long long kq{slot} = rbase + (lane < {nch} ? lane * {vec} : 0);")
        for r in rpass:
            node = index[r]
            how = op_table.REDUCTION_OPS[node.op]
            acc = accs[r] = em.fresh("acc")
            if how == "gather":
                # Sum of the one element whose position in the row is the index (0 elsewhere): exact.
                picks[r] = em.fresh("pick")
                em.emit(f"const long long {picks[r]} = (long long){em.value(node.args[2]['$'], 'row')};")
            em.emit(f"float {acc} = {_IDENTITY[how]};")
            if r in var_of:
                _, src = reduction_dims(node, index)
                shift, origin = em.fresh("shift"), em.fresh("origin")
                if looped:
                    em.emit(f"const float {shift} = {em.value(src.name, f'kq{slot}')};")
                    em.memo = {}
                else:
                    em.emit(f"const float {shift} = {em.value(src.name, prefixes[0] + '0')};")
                s1, s2 = em.fresh("s1_"), em.fresh("s2_")
                em.emit(f"float {s1} = 0.f, {s2} = 0.f;")
                moments[r] = (shift, origin, s1, s2)

        def accumulate(prefix: str, guard: str) -> None:
            for r in rpass:
                node = index[r]
                how = op_table.REDUCTION_OPS[node.op]
                _, src = reduction_dims(node, index)
                acc = accs[r]
                for v in range(vec):
                    ix = f"{prefix}{v}"
                    val = em.value(src.name, ix)
                    if r in picks:
                        val = f"(({ix} - rbase) == {picks[r]} ? {val} : 0.f)"
                    if r in moments:
                        shift, _, s1, s2 = moments[r]
                        d = em.fresh("d")
                        em.emit(f"const float {d} = {f'{guard} ? {val} - {shift} : 0.f' if guard else f'{val} - {shift}'};")
                        em.emit(f"{s1} += {d}; {s2} = fmaf({d}, {d}, {s2});")
                        continue
                    combined = _COMBINE[how].format(a=acc, b=val)
                    em.emit(f"{acc} = {guard} ? {combined} : {acc};" if guard else f"{acc} = {combined};")

        if looped:
            open_loop()
            accumulate("e0_", "")
            close_loop()
        else:
            for k, prefix in enumerate(prefixes):
                accumulate(prefix, guards[k])
        # Across the row: warp shuffles, then (a block per row) one barrier for the whole pass.
        first_slot = slot
        for r in rpass:
            how = op_table.REDUCTION_OPS[index[r].op]
            acc = accs[r]
            if r in moments:
                shift, origin, s1, s2 = moments[r]
                # Loaded here, after the pass, so that it holds no register through the loop.
                _, src = reduction_dims(index[r], index)
                em.emit(f"const float {origin} = {em.value(src.name, f'kr{first_slot}')};")
                n_, mu, m2 = em.fresh("n"), em.fresh("mu"), em.fresh("m2_")
                em.emit(f"float {n_}, {mu}, {m2};")
                em.emit(f"stitch_moments_local({cnt}, {s1}, {s2}, {shift} - {origin}, {n_}, {mu}, {m2});")
                em.emit("#pragma unroll")
                em.emit(f"for (int o = 16; o > 0; o >>= 1) stitch_moments_merge({n_}, {mu}, {m2}, "
                        f"__shfl_xor_sync(0xffffffffu, {n_}, o), __shfl_xor_sync(0xffffffffu, {mu}, o), "
                        f"__shfl_xor_sync(0xffffffffu, {m2}, o));")
                moments[r] = (n_, mu, m2, origin)
                if warps_per_row > 1:
                    em.emit(f"if ((threadIdx.x & 31) == 0) {{ red[{slot}][threadIdx.x >> 5] = {n_}; "
                            f"red[{slot + 1}][threadIdx.x >> 5] = {mu}; red[{slot + 2}][threadIdx.x >> 5] = {m2}; }}")
                slot += 3
                continue
            em.emit("#pragma unroll")
            em.emit(f"for (int o = 16; o > 0; o >>= 1) "
                    f"{acc} = {_COMBINE[how].format(a=acc, b=f'__shfl_xor_sync(0xffffffffu, {acc}, o)')};")
            if warps_per_row > 1:
                em.emit(f"if ((threadIdx.x & 31) == 0) red[{slot}][threadIdx.x >> 5] = {acc};")
            slot += 1
        if warps_per_row > 1:
            em.emit("__syncthreads();")
            # Every warp of the row reads the row's partials and folds them with shuffles.
            part = f"((threadIdx.x >> 5) & ~{warps_per_row - 1}) + (threadIdx.x & {warps_per_row - 1})"
            s = first_slot
            for r in rpass:
                how = op_table.REDUCTION_OPS[index[r].op]
                if r in moments:
                    n_, mu, m2, _ = moments[r]
                    em.emit(f"{n_} = red[{s}][{part}]; {mu} = red[{s + 1}][{part}]; {m2} = red[{s + 2}][{part}];")
                    em.emit("#pragma unroll")
                    em.emit(f"for (int o = {warps_per_row // 2}; o > 0; o >>= 1) stitch_moments_merge({n_}, {mu}, {m2}, "
                            f"__shfl_xor_sync(0xffffffffu, {n_}, o), __shfl_xor_sync(0xffffffffu, {mu}, o), "
                            f"__shfl_xor_sync(0xffffffffu, {m2}, o));")
                    s += 3
                    continue
                acc = accs[r]
                em.emit(f"{acc} = red[{s}][{part}];")
                em.emit("#pragma unroll")
                em.emit(f"for (int o = {warps_per_row // 2}; o > 0; o >>= 1) "
                        f"{acc} = {_COMBINE[how].format(a=acc, b=f'__shfl_xor_sync(0xffffffffu, {acc}, o)')};")
                s += 1
        for r in rpass:
            node = index[r]
            how = op_table.REDUCTION_OPS[node.op]
            acc = accs[r]
            if r in moments:
                n_, mu, m2, origin = moments[r]
                em.emit(f"{acc} = {origin} + {mu};")
                r2 = var_of[r]
                acc2 = em.fresh("acc")
                scale = f" * {op_table.c_float(1.0 / row_len)}" if op_table.REDUCTION_OPS[index[r2].op] == "mean" else ""
                # Rounding can leave M2 a hair below zero for a constant row; NaN stays NaN.
                em.emit(f"float {acc2} = stitch_max_nan({m2}, 0.f){scale};")
                em.row_values[r2] = _rounded(em, acc2, index[r2].dtype)
                em.row_vars.add(em.row_values[r2])
            elif how == "mean":
                em.emit(f"{acc} *= {op_table.c_float(1.0 / row_len)};")
            em.row_values[r] = _rounded(em, acc, node.dtype)
            em.row_vars.add(em.row_values[r])
    if looped:
        open_loop(reverse=True)
        prefixes, guards = ["e0_"], [""]
    stores: list[str] = []
    group_outputs = group.outputs
    group.outputs = full_outs
    for k, prefix in enumerate(prefixes):
        stores += w.store(k, prefix, guards[k])
    group.outputs = group_outputs
    # Full outputs keep their positions in the parameter list; re-map store targets.
    stores = [_retarget(s, full_outs, group.outputs) for s in stores]
    if partial and stores:
        stores = ["if (live) {"] + ["  " + s for s in stores] + ["}"]
    if looped:
        em.lines += [em.indent + s for s in stores]
        stores = []
        close_loop()
    for o in row_outs:
        val = em.value(o, "row")
        o_idx = group.outputs.index(o)
        cond = "lane == 0 && live" if partial else "lane == 0"
        stores.append(f"if ({cond}) out{o_idx}[row] = stitch_from_float<{_c_type(index[o].dtype)}>({val});")
    body = _row_reciprocals(em.lines, em.row_vars) + ["  " + s for s in stores]
    src = PREAMBLE + f"""
extern "C" __global__ void __launch_bounds__({block}) {name}({w.signature()}) {{
{chr(10).join(body)}
}}
"""
    # exp's fast unit is within 2 ulp + |x| * 2^-24 relative: far inside the fp32 tolerance.
    src = re.sub(r"(?<![\w.])expf\(", "__expf(", src)
    src = _finish(src, group, index)
    grid = math.ceil(rows / rows_per_block)
    how_rows = "a warp" if rt == 32 else f"{rt} threads"
    return KernelSpec(name=name, source=src, kind="row_reduction", params=w.leaves + group.outputs,
                      outputs=list(group.outputs), grid=grid, block=block,
                      note=(f"{len(group.nodes)} ops, {rows} rows of {row_len}, {how_rows} per row, {vec}-wide"
                            + (", streamed (statistics in one pass, outputs in a second)" if looped else "")))


def _rounded(em: Emitter, acc: str, dtype: str) -> str:
    """The reduction's value rounded to its dtype, as eager rounds it (in place)."""
    if dtype != "float32":
        em.emit(f"{acc} = {_round(acc, dtype)};")
    return acc


def _row_reciprocals(lines: list[str], row_vars: set[str]) -> list[str]:
    """``x / d`` with ``d`` one value per row becomes ``x * (1 / d)``, the reciprocal taken once per row.

    Within 1.5 ulp of the quotient; a full-precision division per element costs about ten instructions.
    """
    division = re.compile(r"\(([\w\[\]]+) / (\w+)\)|stitch_div(?:_fast)?\(([\w\[\]]+), (\w+)\)")
    wanted = {m.group(2) or m.group(4) for line in lines for m in division.finditer(line)} & row_vars
    if not wanted:
        return lines
    out = list(lines)
    for d in sorted(wanted):
        # After the statement that gives d its final value (row values are assigned at the top level).
        defs = [i for i, line in enumerate(out) if re.search(rf"(?<![\w\[])(?:float )?{d} [*+]?= ", line)]
        if not defs:
            continue
        at = max(defs)
        indent = re.match(r"\s*", out[at]).group(0)
        if indent != "  ":
            continue  # defined inside a loop or a branch: leave the division alone
        out.insert(at + 1, f"{indent}const float rcp_{d} = 1.f / {d};")
        for i in range(at + 2, len(out)):
            out[i] = re.sub(rf"\(([\w\[\]]+) / {d}\)|stitch_div(?:_fast)?\(([\w\[\]]+), {d}\)",
                            lambda m: f"({m.group(1) or m.group(2)} * rcp_{d})", out[i])
    return out


def _retarget(line: str, local: list[str], full: list[str]) -> str:
    """Stores were written with output numbers among ``local``; use numbers among ``full``."""
    def sub(m: re.Match) -> str:
        k = int(m.group(1))
        return f"out{full.index(local[k])} +" if k < len(local) else m.group(0)
    return re.sub(r"out(\d+) \+", sub, line)


COL_SPLIT = 8  # at least this many threads of a block share one column's reduction
COL_THREADS = 132 * 2048  # enough threads to fill an H100 (132 SMs x 2048)
COL_SMEM = 32 * 1024  # bytes of partial results a block may keep (48 KB is the static limit)


def col_kernel(group: Group, index: dict[str, OpNode], name: str) -> KernelSpec:
    """Reductions over a middle dimension: x[O, R, I] -> y[O, I].

    A thread takes VEC consecutive columns (one 16-byte load per step along R, coalesced
    across the warp); each column's R elements are split over SPLIT threads (more when
    there are few columns, to fill the GPU) and combined through shared memory.
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
    red, inner = math.prod(shape[d0:d1 + 1]), math.prod(shape[d1 + 1:])
    domain, cols = math.prod(shape), math.prod(shape[:d0]) * inner
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
    em.fast_math = True
    em.half_outputs = all(index[o].dtype in ("bfloat16", "float16") for o in group.outputs)
    em.mark_exact()
    em.row_nodes = row_nodes
    em.indent = "  "
    w.domain = domain
    vec = _vec_for([index[l].dtype for l in w.leaves if index[l].numel == domain] or ["float32"], inner)
    nred = max(len(reductions), 1)

    def smem(split: int, vec: int) -> int:
        return 4 * nred * split * 32 * vec

    while vec > 1 and smem(COL_SPLIT, vec) > COL_SMEM:
        vec //= 2
    if smem(COL_SPLIT, vec) > COL_SMEM:
        raise Unsupported(f"{len(reductions)} middle-dimension reductions in one group: too many for shared memory")
    w.vec = vec
    em.vector_hint = w.hint
    groups_ = cols // vec  # column groups of VEC (VEC divides the inner size, so a group never straddles o)
    split = COL_SPLIT
    while split < 32 and split * 2 <= red and groups_ * split < COL_THREADS and smem(split * 2, vec) <= COL_SMEM:
        split *= 2
    block = 32 * split
    em.emit("const long long g = (long long)blockIdx.x * 32 + (threadIdx.x & 31);")
    em.emit("const int ty = threadIdx.x >> 5;")
    em.emit(f"const bool live = g < {groups_}LL;")
    em.emit(f"const long long col0 = (live ? g : 0) * {vec}LL;")
    em.emit(f"const long long o = col0 / {inner}LL, i = col0 % {inner}LL;")
    em.emit(f"__shared__ float part[{nred}][{split}][{32 * vec}];")
    accs: dict[str, list[str]] = {}
    for r in reductions:
        how = op_table.REDUCTION_OPS[index[r].op]
        accs[r] = [em.fresh("acc") for _ in range(vec)]
        em.emit(f"float {', '.join(f'{a} = {_IDENTITY[how]}' for a in accs[r])};")
    em.emit("#pragma unroll 4")
    em.emit(f"for (long long r = ty; r < {red}LL; r += {split}) {{")
    em.indent += "  "
    em.memo = {}
    w.vec_loaded = {}
    w.declare_chunk(0, f"(o * {red}LL + r) * {inner}LL + i")
    for r in reductions:
        how = op_table.REDUCTION_OPS[index[r].op]
        _, src = reduction_dims(index[r], index)
        for v, acc in enumerate(accs[r]):
            val = em.value(src.name, f"e0_{v}")
            em.emit(f"{acc} = {_COMBINE[how].format(a=acc, b=val)};")
    em.indent = em.indent[:-2]
    em.emit("}")
    em.memo = {}
    w.vec_loaded = {}
    for r_i, r in enumerate(reductions):
        for v, acc in enumerate(accs[r]):
            em.emit(f"part[{r_i}][ty][{v * 32} + (threadIdx.x & 31)] = {acc};")
    em.emit("__syncthreads();")
    em.emit("if (ty != 0 || !live) return;")
    for v in range(vec):
        # One scope per column: the epilogue reads the column's values as row values at ``row``.
        em.emit("{")
        em.emit(f"const long long row = col0 + {v}LL;")
        em.memo = {}
        em.row_values = {}
        for r_i, r in enumerate(reductions):
            node = index[r]
            how = op_table.REDUCTION_OPS[node.op]
            acc = accs[r][v]
            em.emit("#pragma unroll")
            em.emit(f"for (int q = 1; q < {split}; ++q) "
                    f"{acc} = {_COMBINE[how].format(a=acc, b=f'part[{r_i}][q][{v * 32} + (threadIdx.x & 31)]')};")
            if how == "mean":
                em.emit(f"{acc} *= {op_table.c_float(1.0 / red)};")
            if node.dtype != "float32":
                em.emit(f"{acc} = {_round(acc, node.dtype)};")
            em.row_values[r] = acc
        for o_idx, o in enumerate(group.outputs):
            val = em.value(o, "row")
            em.emit(f"out{o_idx}[row] = stitch_from_float<{_c_type(index[o].dtype)}>({val});")
        em.emit("}")
    src = PREAMBLE + f"""
extern "C" __global__ void __launch_bounds__({block}) {name}({w.signature()}) {{
{chr(10).join(em.lines)}
}}
"""
    src = re.sub(r"(?<![\w.])expf\(", "__expf(", src)
    src = _finish(src, group, index)
    return KernelSpec(name=name, source=src, kind="col_reduction", params=w.leaves + group.outputs,
                      outputs=list(group.outputs), grid=math.ceil(groups_ / 32), block=block,
                      note=(f"{len(group.nodes)} ops, {cols} columns of {red} (stride {inner}), "
                            f"{vec} columns a thread, {split} threads per column"))
