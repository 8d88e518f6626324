"""The pointwise kernel of the template Coder, and what every kernel writer shares.

Pointwise: one pass, no loop; each thread takes one or two chunks of VEC elements
(16-byte loads and stores, about 8 elements a thread), issuing every load before the
first store. The math takes the cheaper exact-enough forms (op_table.FAST_POINTWISE,
the softplus / Mish patterns of the emitter) except where a value feeds a comparison.
``_Writer`` holds a group's kernel parameters, its vector loads and stores; the
reduction and scan kernels (``reduction_kernels``, ``scan_kernel``) build on it.

Shapes are the Task's (concrete): sizes are compile-time constants.
"""

from __future__ import annotations

import math
import re

from attrs import define, field

from stitch_lsp.plan import op_table, pooling
from stitch_lsp.plan.fusion import Group
from stitch_lsp.coders.template.cuda_common import PREAMBLE
from stitch_lsp.coders.template.emitter import Digit, Emitter, Staged, Unsupported, contiguous_strides
from stitch_lsp.op_graph import OpNode

THREADS = 256


@define
class KernelSpec:
    """One generated kernel and how the binding launches it."""

    name: str
    source: str
    kind: str  # pointwise | row_reduction | col_reduction | scan | gemm
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
    # Buffers the kernel writes that no graph node names (a split row's partial results): name -> (shape, dtype).
    scratch: dict = field(factory=dict)
    # Inputs read in another memory layout than contiguous: name -> torch memory format ("channels_last").
    layouts: dict = field(factory=dict)
    # Outputs written in another memory layout than contiguous (a chained kernel's, in channels-last).
    out_layouts: dict = field(factory=dict)
    # Inputs read in place at the caller's strides (forward's transposed views): name -> strides; the binding
    # passes a tensor at other strides in a copy laid out so.
    strided: dict = field(factory=dict)
    # Dynamic shared memory a block takes, in bytes (a cluster holding its rows there).
    shared: int = 0
    # A team kernel's blocks a row (``reduction_kernels.team_for``): it loops over the rows, and its blocks wait
    # for one another, so it is launched cooperatively (all resident at once), with as many teams as the GPU holds,
    # up to ``grid / team``.
    team: int = 0
    # Scratch buffers that must read zero when the kernel starts (a team kernel's arrival counts).
    zeroed: list = field(factory=list)
    # Blocks a cooperative kernel needs resident at once, at the fewest (a lagged kernel's ring holds a row's
    # share of each block only from this many on).
    least_blocks: int = 0


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
        self.domain = 0  # elements a kernel of a thread per chunk covers (its largest output); 0 for the others
        self.em = emitter(index, self.members, lambda leaf: self.param_of[leaf])
        used_inside = {r for n in group.nodes for r in index[n].refs() if r in self.members}
        self.em.stored_only = {o for o in group.outputs if o not in used_inside}
        self.vec_loaded: dict[tuple[str, str], list[str]] = {}
        # Where loaded chunks live: registers (None), or slots of this shared-memory array, one per chunk and
        # thread (``held_slots`` of them so far): a cluster's blocks holding rows longer than their registers.
        self.held: str | None = None
        self.held_threads = 0  # threads of the block sharing ``held``
        self.held_slots = 0
        # Full-size inputs a team kernel stages in shared memory (leaf -> the array holding its part of the row,
        # indexed from the part's first element ``pbase``): their chunks are read from there.
        self.team_stage: dict[str, str] = {}
        self.chunk_base: dict[str, str] = {}  # element var -> (chunk base var, lane)
        self.elem_of: dict[str, tuple[str, int]] = {}
        self.vec = 1

    def signature(self) -> str:
        params = [f"const {_c_type(self.index[l].dtype)}* __restrict__ {self.param_of[l]}" for l in self.leaves]
        params += [f"{_c_type(self.index[o].dtype)}* __restrict__ out{k}" for k, o in enumerate(self.group.outputs)]
        return ", ".join(params)

    def hint(self, leaf: str, ix: str):
        if leaf in self.team_stage:
            m = re.fullmatch(r"(e\d+_)(\d+)", ix)
            if m and m.group(1) in self.chunk_base:
                read = f"{self.team_stage[leaf]}[{self.chunk_base[m.group(1)]} - pbase + {m.group(2)}]"
                key = (leaf, ix)
                if key not in self.vec_loaded:
                    if self.em.depth > self.em.uniform_depth:
                        return read  # inside a per-element cat branch: a variable there would not outlive it
                    var = self.em.fresh("s")
                    self.em.emit(f"const float {var} = {read};")
                    self.vec_loaded[key] = [var]
                return self.vec_loaded[key][0]
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
            start = base if mod is None else f"({base} % {mod}LL)"
            self.vec_loaded[key] = self.load_vector(f"{self.param_of[leaf]} + {start}")
        return self.vec_loaded[key][lane]

    def load_vector(self, pointer: str) -> list[str]:
        """One chunk's VEC values loaded from ``pointer``: C expressions for each, in registers or (``held``)
        in this thread's slot of the shared array, laid out so that a warp's threads read neighbouring words."""
        arr = self.em.fresh("ld")
        self.em.emit(f"float {arr}[{self.vec}];")
        self.em.emit(f"stitch_ldv<{self.vec}>({pointer}, {arr});")
        if self.held is None:
            return [f"{arr}[{v}]" for v in range(self.vec)]
        slot = self.em.fresh("held")
        t = self.held_threads
        self.em.emit(f"float* {slot} = {self.held} + {self.held_slots * self.vec * t} + threadIdx.x;")
        self.em.emit(" ".join(f"{slot}[{v * t}] = {arr}[{v}];" for v in range(self.vec)))
        self.held_slots += 1
        return [f"{slot}[{v * t}]" for v in range(self.vec)]

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
            self.vec_loaded[key] = self.load_vector(f"{self.param_of[leaf]} + {base_c}")
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

    def element_emitter(self, out_dtypes: list[str]) -> None:
        """Set the emitter up for a kernel of a thread per element (or chunk): vector loads through this writer,
        the cheaper math forms, half-precision rounding where every output is half precision."""
        em = self.em
        em.vector_hint = self.hint
        em.fast_math = True
        em.half_outputs = all(d in ("bfloat16", "float16") for d in out_dtypes)
        em.mark_exact()
        em.chunk_lanes = self.lanes_of
        em.save_loads = lambda: dict(self.vec_loaded)
        em.restore_loads = lambda state: setattr(self, "vec_loaded", state)
        em.indent = "  "

    def declare_chunk(self, k: int, base_expr: str) -> str:
        base = f"c{k}"
        self.em.emit(f"const long long {base} = {base_expr};")
        prefix = f"e{k}_"
        self.chunk_base[prefix] = base
        for v in range(self.vec):
            self.em.emit(f"[[maybe_unused]] const long long {prefix}{v} = {base} + {v};")
        return prefix

    def store(self, k: int, prefix: str, guard: str) -> list[str]:
        """The stores of chunk ``k``: the lines to run after the body, for outputs of the kernel's whole domain. An
        output of fewer elements (a group's outputs of several sizes) is computed and stored in the body, in a
        block of its own that only the chunks inside it enter (its inputs are not read past its end)."""
        lines = []
        em = self.em
        for o_idx, out in enumerate(self.group.outputs):
            numel = self.index[out].numel
            if numel < self.domain:
                inside = f"c{k} < {numel}LL" + (f" && {guard}" if guard else "")
                saved_memo, saved_loads = dict(em.memo), em.save_loads()
                em.emit(f"if ({inside}) {{")
                em.indent += "  "
                em.depth += 1
                vals = [em.value(out, f"{prefix}{v}") for v in range(self.vec)]
                arr = em.fresh("st")
                em.emit(f"const float {arr}[{self.vec}] = {{{', '.join(vals)}}};")
                em.emit(f"stitch_stv<{self.vec}>(out{o_idx} + c{k}, {arr});")
                em.depth -= 1
                em.indent = em.indent[:-2]
                em.emit("}")
                em.memo = saved_memo
                em.restore_loads(saved_loads)
                continue
            vals = [em.value(out, f"{prefix}{v}") for v in range(self.vec)]
            arr = em.fresh("st")
            lines.append(f"{{ const float {arr}[{self.vec}] = {{{', '.join(vals)}}}; "
                         f"stitch_stv<{self.vec}>(out{o_idx} + c{k}, {arr}); }}")
        if guard and lines:
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
                     per_thread: int | None = None, vec: int | None = None) -> KernelSpec:
    """One pass over the outputs' elements; ``threads`` / ``per_thread`` / ``vec`` (elements a chunk) override
    ``pointwise_launch`` and the 16-byte chunks."""
    w = _Writer(group, index, name)
    outs = [index[o] for o in group.outputs]
    domain = max(o.numel for o in outs)
    for o in outs:
        # An output of fewer elements is written by the chunks of its own range (``_Writer.store``): one launch
        # where a kernel per size would compute the shared values twice (an RNN step's new hidden state beside
        # the next step's concatenated input).
        if o.numel == 0 and domain:
            raise Unsupported(f"outputs of different sizes ({list(o.shape)} vs {domain} elements)")
    w.domain = domain
    identity = [index[l].dtype for l in w.leaves if index[l].numel == domain] + [o.dtype for o in outs]
    w.vec = vec or _vec_for(identity, domain)
    while w.vec > 1 and any(o.numel % w.vec for o in outs):
        w.vec //= 2
    nchunk = domain // w.vec
    auto_threads, auto_unroll = pointwise_launch(group, index, nchunk, w.vec)
    threads = threads or auto_threads
    unroll = per_thread or auto_unroll
    em = w.em
    w.element_emitter([o.dtype for o in outs])
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


WINDOW_PER_THREAD = None  # outputs a thread of a pooling kernel takes (None: as a pointwise kernel would)
WINDOW_THREADS = None


# A pool along the last dim whose rows hold at least a tile of outputs stages its block's input span in
# shared memory: 2048 outputs a block of 256 threads (8 a thread). On an H100-class GPU (H200, 1-D pools at
# KernelBench sizes) this ran 1.55x the thread-per-output kernel, 87-90% of the copy bandwidth against 57%;
# 1024 outputs a block ran 77%, 4096 83-85%.
STAGE_TILE = 2048
STAGE_THREADS = 256
STAGE_MAX_FLOATS = 12 * 1024  # the staged span: 48 KiB of static shared memory at most


def _staged_pool(group: Group, index: dict[str, OpNode]):
    """(pool node, its window, its input) when the group's one pool can be staged: its window runs along the
    last dim only (the others of size 1, stride 1, no padding), over rows of at least a tile of outputs, and
    every output of the group is one element per pool output."""
    pools = [index[n] for n in group.nodes if op_table.classify(index[n].op, index[n].dtype) == "window"]
    if len(pools) != 1:
        return None
    pool = pools[0]
    win = pooling.window_of(pool.op, pool.args, pool.kwargs)
    src = index[pool.args[0]["$"]]
    lead_trivial = all(k == 1 and s == 1 and p == 0 for k, s, p in
                       zip(win.kernel[:-1], win.stride[:-1], win.padding[:-1]))
    if not lead_trivial or win.kernel[-1] < 2 or len(src.shape) != len(pool.shape) or src.shape[:-1] != pool.shape[:-1]:
        return None
    span = (STAGE_TILE - 1) * win.stride[-1] + (win.kernel[-1] - 1) * win.dilation[-1] + 1
    if pool.shape[-1] < STAGE_TILE or span > STAGE_MAX_FLOATS:
        return None
    if any(index[o].numel != pool.numel for o in group.outputs):
        return None
    return pool, win, src


def staged_window_kernel(group: Group, index: dict[str, OpNode], name: str) -> KernelSpec:
    """A block takes STAGE_TILE consecutive outputs of one row: it stages the span of the pool's input those
    windows cover (the work before the pool computed once an element, not once a window) in shared memory
    with coalesced loads, then each thread folds its outputs' windows from there and runs the work after it.
    The row's coordinates come from the block's index, once a block."""
    found = _staged_pool(group, index)
    if found is None:
        raise Unsupported("no pool this kernel can stage")
    pool, win, src = found
    w = _Writer(group, index, name)
    w.vec = 1
    em = w.em
    w.element_emitter([index[o].dtype for o in group.outputs])
    k, s, d, p = win.kernel[-1], win.stride[-1], win.dilation[-1], win.padding[-1]
    lout, lin = pool.shape[-1], src.shape[-1]
    rows = pool.numel // lout
    nseg = math.ceil(lout / STAGE_TILE)
    grid = rows * nseg
    if grid >= 2 ** 31:
        raise Unsupported("too many blocks for one launch")
    span = (STAGE_TILE - 1) * s + (k - 1) * d + 1
    em.emit(f"__shared__ float stg_span[{span}];")
    em.emit(f"const long long stg_row = (long long)blockIdx.x / {nseg}LL;")
    em.emit(f"const int stg_first = (int)((long long)blockIdx.x - stg_row * {nseg}LL) * {STAGE_TILE};")
    lead = pool.shape[:-1]
    lstr = contiguous_strides(lead)
    coords: list[str] = []
    for dim, size in enumerate(lead):
        if size == 1:
            coords.append("0")
            continue
        var = f"stg_r{dim}"
        expr = f"stg_row / {lstr[dim]}LL" if lstr[dim] != 1 else "stg_row"
        outermost = math.prod(lead[:dim]) == 1  # the row index never exceeds this dim's range: no modulo
        em.emit(f"const long long {var} = {expr if outermost else f'({expr}) % {size}LL'};")
        coords.append(var)
    digits = [(Digit(c, size), dim) for dim, (c, size) in enumerate(zip(coords, lead)) if size > 1]
    # The span: the pool's input at positions first * stride - padding + i of the block's row.
    pad = op_table.c_float("-inf") if win.how == "max" else "0.f"
    sstr = contiguous_strides(src.shape)
    em.emit(f"for (int stg_i = threadIdx.x; stg_i < {span}; stg_i += {STAGE_THREADS}) {{")
    em.indent += "  "
    em.emit(f"const int stg_h = stg_first{f' * {s}' if s != 1 else ''}{f' - {p}' if p else ''} + stg_i;")
    em.emit(f"float stg_v = {pad};")
    em.emit(f"if (stg_h >= 0 && stg_h < {lin}) {{")
    em.indent += "  "
    saved_memo, saved_loads = dict(em.memo), em.save_loads()
    em.depth += 1  # nothing computed in the loop outlives it
    element = em._index([(g, sstr[dim]) for g, dim in digits] + [(Digit("stg_h", lin), 1)])
    value = em.value(src.name, element)
    exact = em.exact_in.get(value) == pool.dtype
    em.emit(f"stg_v = {value};")
    em.depth -= 1
    em.memo = saved_memo
    em.restore_loads(saved_loads)
    em.indent = em.indent[:-2]
    em.emit("}")
    em.emit("stg_span[stg_i] = stg_v;")
    em.indent = em.indent[:-2]
    em.emit("}")
    em.emit("__syncthreads();")
    # The outputs: thread t takes positions first + t, first + t + 256, ...
    em.emit("#pragma unroll")
    em.emit(f"for (int stg_m = 0; stg_m < {STAGE_TILE // STAGE_THREADS}; ++stg_m) {{")
    em.indent += "  "
    em.emit(f"const int stg_pos = stg_first + stg_m * {STAGE_THREADS} + (int)threadIdx.x;")
    em.emit(f"if (stg_pos < {lout}) {{")
    em.indent += "  "
    prefix = w.declare_chunk(0, f"stg_row * {lout}LL + stg_pos")
    ostr = contiguous_strides(pool.shape)
    em.forms[f"{prefix}0"] = (tuple((g, ostr[dim]) for g, dim in digits) + ((Digit("stg_pos", lout), 1),), 0)
    em.staged[pool.name] = Staged(array="stg_span", first="stg_first", pos="stg_pos", coords=coords + ["stg_pos"],
                                  length=lin, exact=exact)
    for line in w.store(0, prefix, ""):
        em.emit(line)
    em.indent = em.indent[:-2]
    em.emit("}")
    em.indent = em.indent[:-2]
    em.emit("}")
    src_text = PREAMBLE + f"""
extern "C" __global__ void __launch_bounds__({STAGE_THREADS}) {name}({w.signature()}) {{
{chr(10).join(em.lines)}
}}
"""
    src_text = _finish(src_text, group, index)
    return KernelSpec(name=name, source=src_text, kind="window", params=w.leaves + group.outputs,
                      outputs=list(group.outputs), grid=grid, block=STAGE_THREADS,
                      note=(f"{op_table.short(pool.op)} {list(src.shape)} -> {list(pool.shape)}; {STAGE_TILE} outputs "
                            f"a block of {STAGE_THREADS} threads, the input span staged in shared memory"))


def window_kernel(group: Group, index: dict[str, OpNode], name: str, staged: bool = True,
                  named: dict[str, OpNode] | None = None) -> KernelSpec:
    """Pooling (with the pointwise work before and after it): a thread per output element, neighbouring
    threads on neighbouring outputs, so each step of the window loop is one coalesced load across a warp
    (the windows' overlap is served by L1); the input is read once from memory, the output written once.
    Long rows of a window along the last dim stage their span instead (``staged_window_kernel``).
    ``named``: the index whose shapes the note gives (the code's own, where ``index`` is rewritten in
    channels-last order)."""
    named = named or index
    if staged and _staged_pool(group, index) is not None:
        try:
            return staged_window_kernel(group, index, name)
        except Unsupported:
            pass  # the work after the pool reads other elements than the thread's own: a thread an output
    spec = pointwise_kernel(group, index, name, vec=1, per_thread=WINDOW_PER_THREAD, threads=WINDOW_THREADS)
    pools = [index[n] for n in group.nodes if op_table.classify(index[n].op, index[n].dtype) == "window"]
    spec.kind = "window"
    spec.note = (", ".join(f"{op_table.short(p.op)} {list(named[p.refs()[0]].shape)} -> {list(named[p.name].shape)}"
                           for p in pools)
                 + f"; {spec.note.replace('1-wide', 'a thread an output')}")
    return spec
