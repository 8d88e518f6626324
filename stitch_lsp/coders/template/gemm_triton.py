"""A ``GemmSpec`` → the Triton kernel that computes it: tensor-core GEMM, then the epilogue on the tile.

One program computes a BM x BN tile of every accumulator, looping over K in BK steps (Triton pipelines
the loads ``num_stages`` deep and issues the tensor-core instructions: wgmma on Hopper). fp32 inputs
take ``tl.dot(..., input_precision="tf32x3")``: each operand split into a TF32 high part and a TF32
low part, three products summed in fp32 (the error of an fp32 GEMM, on tensor cores); the reference's
own ``allow_tf32`` gives one TF32 pass, as cuBLAS would. bf16 / fp16 take one pass with fp32
accumulation. The epilogue then runs on the accumulator tile in registers: bias, the fused ops,
tensors it reads at the tile's rows and columns, and one store per output. Tiles are ordered in
groups of GROUP_M rows so that neighbouring programs share A and B panels in L2.

Sizes (``M``, ``N``, ``K``) and the tile (``BM``, ``BN``, ``BK``, ``GROUP_M``) are constexpr parameters,
with ``num_warps`` and ``num_stages`` as launch options: one source serves every tile tried, and Triton
specialises the binary to the task's shapes.
"""

from __future__ import annotations

import hashlib
import math

from stitch_lsp.plan.gemm_spec import GemmSpec
from stitch_lsp.plan.gemm_ops import (
    TRITON_DTYPES, TRITON_POINTWISE, expression, helpers_for, literal, operand_count, rounded,
)
from stitch_lsp.plan.op_table import CREATION_OPS

ROW_REDUCE = {"aten.sum.dim_IntList": "sum", "aten.mean.dim": "mean", "aten.amax.default": "max",
              "aten.amin.default": "min"}
from stitch_lsp.coders.template.emitter import Unsupported

HEADER = '''"""{title}

Runtime dependency: Triton (installed with PyTorch on Linux; ``pip install triton`` elsewhere).
"""
import triton
import triton.language as tl
from triton.language.extra import libdevice

_INF = tl.constexpr(float("inf"))
'''

def _contiguous_strides(shape) -> list[int]:
    strides = [1] * len(shape)
    for d in range(len(shape) - 2, -1, -1):
        strides[d] = strides[d + 1] * shape[d + 1]
    return strides


def broadcast_index(dst: list[int], src: list[int], rm: str, rn: str) -> tuple[str, bool, bool]:
    """(index into a contiguous ``src``, uses rows, uses columns) for the element of the row-structured
    ``dst`` = [..., N'] at row ``rm`` (a flat index over the leading sizes) and column ``rn``."""
    if math.prod(src) == 1:
        return "0", False, False
    pad = len(dst) - len(src)
    full = [1] * pad + list(src)
    strides = _contiguous_strides(full)
    lead = dst[:-1]
    terms: list[str] = []
    rows = cols = False
    for d, size in enumerate(full):
        if size == 1:
            continue
        if d == len(dst) - 1:
            coord = rn
            cols = True
        else:
            inner = math.prod(lead[d + 1:])
            coord = rm if inner == 1 else f"({rm} // {inner})"
            if d > 0:
                coord = f"({coord} % {lead[d]})"
            rows = True
        terms.append(coord if strides[d] == 1 else f"{coord} * {strides[d]}")
    return " + ".join(terms) if terms else "0", rows, cols


class _Epilogue:
    """Writes the statements that compute the epilogue's values on the tile."""

    def __init__(self, spec: GemmSpec, param: dict[str, str]) -> None:
        self.spec = spec
        self.param = param  # tensor name -> kernel parameter
        self.nodes = {e.name: e.node() for e in spec.epilogue}
        self.lines: list[str] = []
        self.memo: dict[str, str] = {}
        self.loads: dict[tuple, str] = {}
        self.count = 0

    def fresh(self, prefix: str = "v") -> str:
        self.count += 1
        return f"{prefix}{self.count}"

    def emit(self, line: str) -> None:
        self.lines.append("    " + line)

    def load(self, base: str, dst: list[int], src: list[int], dtype: str, rm: str, rn: str) -> str:
        index, rows, cols = broadcast_index(dst, src, rm, rn)
        key = (base, index)
        if key in self.loads:
            return self.loads[key]
        var = self.fresh("ld")
        ptr = self.param[base]
        if not rows and not cols:
            self.emit(f"{var} = tl.load({ptr}).to(tl.float32)")
        else:
            mask = " & ".join(m for m, used in (("(rm < M)", rows), ("(rn < N)", cols)) if used)
            self.emit(f"{var} = tl.load({ptr} + ({index}), mask={mask}, other=0.0).to(tl.float32)")
        self.loads[key] = var
        return var

    def accumulator_value(self, i: int) -> str:
        """The GEMM's own output at the tile: alpha * acc + beta * bias, rounded to the GEMM's dtype."""
        key = f"acc:{i}"
        if key in self.memo:
            return self.memo[key]
        acc = self.spec.accs[i]
        expr = f"acc{i}"
        if acc.alpha != 1.0:
            expr = f"{literal(acc.alpha)} * {expr}"
        if acc.bias:
            col = "rn" if not acc.offset else f"(rn + {acc.offset})"
            b = self.load(acc.bias, [self.spec.m, acc.n_full], acc.bias_shape, self.spec.dtype, "rm", col)
            expr = f"{expr} + {b}" if acc.beta == 1.0 else f"{expr} + {literal(acc.beta)} * {b}"
        var = self.fresh("g")
        self.emit(f"{var} = {rounded(expr, self.spec.dtype)}")
        self.memo[key] = var
        return var

    def value(self, name: str) -> str:
        if name in self.memo:
            return self.memo[name]
        if name in self.spec.acc_of:
            var = self.accumulator_value(self.spec.acc_of[name])
        elif name in self.nodes:
            var = self.compute(self.nodes[name])
        else:
            raise Unsupported(f"{name} is neither an epilogue value nor an accumulator")
        self.memo[name] = var
        return var

    def operand(self, node, arg) -> str:
        if isinstance(arg, dict) and "$" in arg:
            r = arg["$"]
            if r in self.spec.acc_of or r in self.nodes:
                return self.value(r)
            read = self.spec.reads.get(r)
            if read is None:
                raise Unsupported(f"{node.name} reads {r}, which the kernel does not load")
            return self.load(read.base, list(node.shape), read.shape, read.dtype, "rm", "rn")
        if isinstance(arg, bool):
            return "1.0" if arg else "0.0"
        if isinstance(arg, (int, float)):
            return literal(arg)
        raise Unsupported(f"{node.op} has an operand of an unsupported kind")

    def reduce(self, node) -> str:
        """A reduction over the tile's columns (the whole row: the tile is as wide as N): [BM, 1]."""
        src = self.value(node.refs()[0])
        how = ROW_REDUCE[node.op]
        var = self.fresh("r")
        if how in ("sum", "mean"):
            self.emit(f"{var} = tl.sum(tl.where(rn < N, {src}, 0.0), axis=1)[:, None]")
            if how == "mean":
                self.emit(f"{var} = {var} * {literal(1.0 / self.spec.n)}")
        else:
            fill, pick = ("-_INF", "tl.max") if how == "max" else ("_INF", "tl.min")
            # NaN anywhere in the row gives NaN, as torch.amax / amin do.
            self.emit(f"{var} = {pick}(tl.where(rn < N, {src}, {fill}), axis=1)[:, None]")
            self.emit(f"{var} = tl.where(tl.max(((rn < N) & ({src} != {src})).to(tl.float32), axis=1)[:, None] > 0.0, "
                      f"{literal(float('nan'))}, {var})")
        if node.dtype != "float32":
            self.emit(f"{var} = {rounded(var, node.dtype)}")
        return var

    def compute(self, node) -> str:
        if node.op in ROW_REDUCE:
            return self.reduce(node)
        if node.op in CREATION_OPS:
            return literal(node.args[0] if node.op == "aten.scalar_tensor.default" else node.args[1])
        if node.op not in TRITON_POINTWISE:  # a view of an epilogue value: the same element
            return self.value(node.refs()[0])
        args = node.args
        operands = [self.operand(node, a) for a in args[:operand_count(node.op, args)]]
        expr = expression(node.op, args, node.kwargs, operands)
        var = self.fresh()
        self.emit(f"{var} = {rounded(expr, node.dtype)}")
        return var


def kernel_source(spec: GemmSpec, name: str) -> str:
    """The Triton module text: imports and one ``@triton.jit`` kernel named ``name``."""
    if not spec.accs:
        raise Unsupported("a GEMM kernel needs at least one accumulator")
    param = {}
    params = []
    for i, tensor in enumerate(spec.kernel_inputs()):
        p = "a_ptr" if i == 0 else f"t{i}_ptr"
        param[tensor] = p
        params.append(p)
    b_params = [param[acc.b] for acc in spec.accs]
    outs = [f"out{i}_ptr" for i in range(len(spec.outputs))]
    m, n, k = spec.m, spec.n, spec.k
    biggest = max([m * k, n * k, m * n] + [math.prod(acc.b_shape) for acc in spec.accs]
                  + [math.prod(r.shape) for r in spec.reads.values()])
    wide = biggest >= 2 ** 31
    dot_opts = f', input_precision="{spec.precision}"' if spec.precision else ""
    body: list[str] = []
    e = body.append
    e("num_m = (M + BM - 1) // BM")
    e("num_n = (N + BN - 1) // BN")
    e("per_group = GROUP_M * num_n")
    e("first_m = (pid // per_group) * GROUP_M")
    e("size_m = min(num_m - first_m, GROUP_M)")
    e("pid_m = first_m + (pid % per_group) % size_m")
    e("pid_n = (pid % per_group) // size_m")
    e("offs_m = pid_m * BM + tl.arange(0, BM)")
    e("offs_n = pid_n * BN + tl.arange(0, BN)")
    e("offs_k = tl.arange(0, BK)")
    cast = ".to(tl.int64)" if wide else ""
    e(f"am = (offs_m % M){cast}")
    e(f"bn = (offs_n % N){cast}")
    if spec.a_trans:
        e("a_ptrs = a_ptr + am[:, None] + offs_k[None, :] * M")
        a_step = "BK * M"
    else:
        e("a_ptrs = a_ptr + am[:, None] * K + offs_k[None, :]")
        a_step = "BK"
    steps = []
    for i, acc in enumerate(spec.accs):
        col = "bn" if not acc.offset else f"(bn + {acc.offset})"
        if acc.b_trans:  # stored [N_full, K]: each column of B is a contiguous row
            e(f"b{i}_ptrs = {b_params[i]} + {col}[None, :] * K + offs_k[:, None]")
            steps.append("BK")
        else:
            e(f"b{i}_ptrs = {b_params[i]} + offs_k[:, None] * {acc.b_shape[1]} + {col}[None, :]")
            steps.append(f"BK * {acc.b_shape[1]}")
        e(f"acc{i} = tl.zeros((BM, BN), dtype=tl.float32)")
    e("for kt in range(0, (K + BK - 1) // BK):")
    e("    if K % BK == 0:")
    e("        a = tl.load(a_ptrs)")
    for i in range(len(spec.accs)):
        e(f"        b{i} = tl.load(b{i}_ptrs)")
    e("    else:")
    e("        k_ok = offs_k < K - kt * BK")
    e("        a = tl.load(a_ptrs, mask=k_ok[None, :], other=0.0)")
    for i in range(len(spec.accs)):
        e(f"        b{i} = tl.load(b{i}_ptrs, mask=k_ok[:, None], other=0.0)")
    for i in range(len(spec.accs)):
        e(f"    acc{i} = tl.dot(a, b{i}, acc{i}{dot_opts})")
    e(f"    a_ptrs += {a_step}")
    for i in range(len(spec.accs)):
        e(f"    b{i}_ptrs += {steps[i]}")
    e(f"rm = offs_m[:, None]{cast}")
    e(f"rn = offs_n[None, :]{cast}")
    e("mask = (rm < M) & (rn < N)")
    epi = _Epilogue(spec, param)
    stores = []
    for i, (out, shape, dtype) in enumerate(zip(spec.outputs, spec.output_shapes, spec.output_dtypes)):
        val = epi.value(out)
        stored = f"({val} != 0.0)" if dtype == "bool" else f"{val}.to({TRITON_DTYPES[dtype]})"
        if out in spec.rows:
            stores.append(f"tl.store({outs[i]} + rm, {stored}, mask=rm < M)")  # one value per row
        else:
            stores.append(f"tl.store({outs[i]} + rm * N + rn, {stored}, mask=mask)")
    tile = ["    " + line for line in body] + epi.lines + ["    " + s for s in stores]
    # PROGRAMS = 0: one program a tile. Otherwise PROGRAMS programs (the grid) loop over the tiles, and
    # the flattened loop lets Triton pipeline the next tile's first loads under this tile's epilogue:
    # where K is short, the fill and the epilogue are much of a tile's time.
    lines = (["    if PROGRAMS == 0:", "        pid = tl.program_id(0)"] + ["    " + line for line in tile]
             + ["    else:", "        for pid in tl.range(tl.program_id(0), ((M + BM - 1) // BM) * ((N + BN - 1) // BN), "
                "PROGRAMS, flatten=True):"] + ["        " + line for line in tile])
    signature = ", ".join(params + outs + ["M: tl.constexpr", "N: tl.constexpr", "K: tl.constexpr", "BM: tl.constexpr", "BN: tl.constexpr", "BK: tl.constexpr",
                                           "GROUP_M: tl.constexpr", "PROGRAMS: tl.constexpr"])
    title = spec.describe()
    kernel = f"\n\n@triton.jit\ndef {name}({signature}):\n" + "\n".join(lines) + "\n"
    return HEADER.format(title=title) + helpers_for(kernel) + kernel


def launch(spec: GemmSpec, tile: list[int]) -> tuple[list[int], dict[str, int], int, int]:
    """(grid, constexpr arguments, num_warps, num_stages) for ``tile`` = [BM, BN, BK, GROUP_M, warps, stages]
    and, for a persistent kernel, the number of programs that loop over the tiles."""
    bm, bn, bk, group_m, warps, stages = tile[:6]
    programs = tile[6] if len(tile) > 6 else 0
    tiles = math.ceil(spec.m / bm) * math.ceil(spec.n / bn)
    grid = [min(tiles, programs) if programs else tiles, 1, 1]
    meta = {"M": spec.m, "N": spec.n, "K": spec.k, "BM": bm, "BN": bn, "BK": bk, "GROUP_M": group_m,
            "PROGRAMS": programs}
    return grid, meta, warps, stages


def kernel_name(spec: GemmSpec) -> str:
    """Named by what it computes, so a tuning run and the program share one source (and one binary)."""
    from stitch_lsp.plan.gemm_tiles import problem_key

    return "stitch_gemm_" + hashlib.sha256(problem_key(spec, "").encode()).hexdigest()[:10]


def gemm_kernel(node):
    """The ``stitch.gemm`` node's kernel, as the template Coder's KernelSpec (backend "triton")."""
    from stitch_lsp.plan.gemm_spec import spec_of
    from stitch_lsp.plan.gemm_tiles import table_tile
    from stitch_lsp.coders.template.kernels import KernelSpec

    spec = spec_of(node)
    name = kernel_name(spec)
    tile = spec.tile or table_tile(spec)
    grid, meta, warps, stages = launch(spec, tile)
    where = {"cache": "measured here", "table": "the default for its class"}.get(spec.tile_source, "the default")
    persistent = f", {grid[0]} persistent programs" if meta["PROGRAMS"] else ""
    note = (f"{spec.describe()}; tile {tile[0]}x{tile[1]}x{tile[2]}, {warps} warps, {stages} stages{persistent} "
            f"({where})")
    return KernelSpec(name=name, source=kernel_source(spec, name), kind="gemm", params=spec.kernel_inputs() + spec.outputs,
                      outputs=list(spec.outputs), grid=grid[0], block=32 * warps, note=note,
                      backend="triton",
                      meta={**meta, "num_warps": warps, "num_stages": stages},
                      tuple_name=node.name if len(spec.outputs) > 1 else "")
