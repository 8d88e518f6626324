"""Pull-model code generation: a node's value at an index, as CUDA statements.

Every value is computed in fp32 at a linear index of its own (contiguous) shape.
Views, broadcasts, slices, permutes and ``cat`` are index maps, so a whole chain
of them costs index arithmetic, not memory traffic. Values are memoised by
(node, index), so a value used twice is computed once and lives in a register.

The index arithmetic, pooling windows and ``cat`` branches are in ``values/``.
"""

from __future__ import annotations

import math
import re
from typing import Any, Callable

from stitch_lsp.coders.template.cuda_common import _round_to
from stitch_lsp.coders.template.values.cat import CatValues
# The index maps and Staged are the kernel writers' too: they import them from here, beside the Emitter.
from stitch_lsp.coders.template.values.index_maps import (  # noqa: F401
    Digit, Unsupported, _align, broadcast_index, contiguous_strides, coords, is_row_broadcast, linear)
from stitch_lsp.coders.template.values.windows import Staged, WindowValues  # noqa: F401
from stitch_lsp.plan import op_table
from stitch_lsp.plan.reduction_domain import Domain, broadcasts_per_row
from stitch_lsp.op_graph import OpNode

# The index of an element of the row the kernel walks, as the kernel writers declare it: ``e{chunk}_{lane}``,
# or where a one-pass variance takes its shift and origin, the thread's first element of the row (``kq{slot}``)
# and the row's first (``kr{slot}``). A per-row value read at any of them is the row's own.
_ELEMENT = re.compile(r"e\d+_\d+|k[qr]\d+")


class Emitter(WindowValues, CatValues):
    """Writes the statements that compute values of one fused group."""

    def __init__(self, index: dict[str, OpNode], members: set[str], leaf_name: Callable[[str], str]) -> None:
        self.index = index
        self.members = members
        self.leaf_name = leaf_name  # group input -> kernel parameter name
        self.lines: list[str] = []
        self.memo: dict[tuple[str, str], str] = {}
        self.counter = 0
        self.indent = "    "
        # Row-kernel context: values per row (reductions and what derives from them).
        self.row_len = 0
        self.row_domain: Domain | None = None  # where rows are not the last dims: how elements map to rows
        self.row_values: dict[str, str] = {}
        self.row_nodes: set[str] = set()
        # Vector loads: (leaf, index var) -> (chunk base expr, lane) filled by the kernel writer.
        self.vector_hint: Callable[[str, str], str | None] = lambda leaf, ix: None
        self.var_defs: dict[str, str] = {}  # index variables and the expressions they name
        self.depth = 0  # > 0 inside a branch of cat: nothing loaded there outlives it
        self.stored_only: set[str] = set()  # values only stored: the store rounds them already
        # Pointwise kernels turn on the cheaper forms (op_table.FAST_POINTWISE and the activation patterns
        # below); values in ``exact`` (they feed a comparison or rounding) keep eager's exact forms.
        self.fast_math = False
        # fp32 products as stitch_mul (rounded, never fused into an FMA): kernels that recompute a value in
        # several passes (reductions) get the same bits each time.
        self.round_products = False
        self.half_outputs = False  # every output of the kernel is fp16 / bf16
        self.exact: set[str] = set()
        self.exact_in: dict[str, str] = {}  # value var -> the half dtype it already holds exactly
        # Cat branches that every lane of a chunk takes together: (ix) -> the other lanes' indices, or None.
        self.chunk_lanes: Callable[[str], list[str] | None] = lambda ix: None
        self.uniform_depth = 0  # how many of the enclosing cat branches are taken by a whole chunk
        self.save_loads: Callable[[], Any] = lambda: None
        # Index variables made from coordinates: var -> ((digit, stride), ...), offset (see Digit).
        self.forms: dict[str, tuple[tuple[tuple[Digit, int], ...], int]] = {}
        self.restore_loads: Callable[[Any], None] = lambda state: None
        # A pool whose block stages its input span in shared memory (kernels.staged_window_kernel):
        # pool node name -> the stage (see Staged); its window is read from there.
        self.staged: dict[str, "Staged"] = {}

    def fresh(self, prefix: str = "v") -> str:
        self.counter += 1
        return f"{prefix}{self.counter}"

    def emit(self, line: str) -> None:
        self.lines.append(self.indent + line)

    # -- values ---------------------------------------------------------------

    def value(self, name: str, ix: str) -> str:
        key = (name, ix)
        if key in self.memo:
            return self.memo[key]
        if name in self.row_nodes and ix != "row":
            raise Unsupported(f"{name} is a per-row value used at a per-element index")
        if name in self.row_values and ix == "row":
            return self.row_values[name]
        node = self.index[name]
        if name not in self.members:
            out = self._load(name, node, ix)
            if node.dtype in ("bfloat16", "float16"):
                self.exact_in[out] = node.dtype
        else:
            out = self._compute(node, ix)
        self.memo[key] = out
        return out

    def _load(self, name: str, node: OpNode, ix: str) -> str:
        hinted = self.vector_hint(name, ix)
        if hinted is not None:
            return hinted
        var = self.fresh()
        self.emit(f"const float {var} = stitch_ld({self.leaf_name(name)}, {ix});")
        return var

    def operand(self, node: OpNode, arg: Any, ix: str) -> str:
        if isinstance(arg, dict) and "$" in arg:
            src = self.index[arg["$"]]
            if ix == "row":
                if src.name in self.row_nodes or (src.name in self.row_values):
                    return self.value(src.name, "row")
                return self.value(src.name, broadcast_index("row", node.shape, src.shape))
            if src.name in self.row_nodes:
                if self.row_domain is not None:
                    per_row = broadcasts_per_row(tuple(src.shape), tuple(node.shape), self.row_domain)
                else:
                    per_row = is_row_broadcast(src.shape, node.shape, self.row_len)
                if not per_row:
                    raise Unsupported(f"{src.name} {list(src.shape)} does not broadcast per row into {list(node.shape)}")
                if not _ELEMENT.fullmatch(ix):
                    # Reached through a permute, a slice or a broadcast: the element may lie in another row.
                    raise Unsupported(f"{src.name} is a per-row value read at another element's index")
                return self.value(src.name, "row")
            return self.value(src.name, broadcast_index(ix, node.shape, src.shape))
        if isinstance(arg, bool):
            return "1.f" if arg else "0.f"
        if isinstance(arg, (int, float)):
            return op_table.c_float(arg)
        raise Unsupported(f"{op_table.short(node.op)} has an operand of an unsupported kind")

    def _compute(self, node: OpNode, ix: str) -> str:
        kind = op_table.classify(node.op, node.dtype)
        args = node.args
        if kind == "creation":
            return self._creation(node, ix)
        if kind == "pointwise":
            fast = self.fast_math and node.name not in self.exact
            if fast and node.dtype == "float32":
                var = self._activation(node, ix)
                if var is not None:
                    return var
            count = op_table.OPERAND_COUNT.get(node.op, len(args))
            template = None
            if fast and node.op in op_table.FAST_POINTWISE:
                template = op_table.FAST_POINTWISE[node.op](args, node.kwargs, self.half_outputs)
            if template is None:
                template = op_table.POINTWISE[node.op](args, node.kwargs)
            if self.round_products and node.dtype == "float32" and node.op in ("aten.mul.Tensor", "aten.mul.Scalar"):
                template = "stitch_mul({a}, {b})"
            operands = [self.operand(node, a, ix) for a in args[:count]]
            names = dict(zip("abc", operands))
            if node.op == "aten.fill.Scalar":
                names = {}
            expr = template.format(**names)
            held = False
            if node.dtype == "bool":
                expr = f"(({expr}) != 0.f ? 1.f : 0.f)"
            elif node.dtype in ("int64", "int32"):
                expr = f"truncf({expr})"  # an integer result (x.long()): its fraction dropped, as eager drops it
            elif node.dtype in ("bfloat16", "float16") and self._selects_exact(node, operands):
                held = True  # one of its operands, already a value of this dtype: rounding would not change it
            elif node.name not in self.stored_only:
                # Eager PyTorch rounds every half-precision op's result; so do we, to give its answers.
                expr = _round_to(expr, node.dtype)
                held = node.dtype in ("bfloat16", "float16")
            if held and expr.replace("_", "").isalnum():
                self.exact_in[expr] = node.dtype
                return expr
            var = self.fresh()
            self.emit(f"const float {var} = {expr};")
            if held:
                self.exact_in[var] = node.dtype
            return var
        if kind == "view":
            return self._view(node, ix)
        if kind == "window":
            return self._window(node, ix)
        if kind == "reduction":
            raise Unsupported(f"{op_table.short(node.op)} used where its row value is not ready")
        raise Unsupported(f"{op_table.short(node.op)} is not fused by the template Coder")

    def _creation(self, node: OpNode, ix: str) -> str:
        """A constant, or (arange) a function of the element's own index."""
        op, args = node.op, node.args
        if op.startswith("aten.arange."):
            start, step = 0, 1
            if op == "aten.arange.start":
                start = args[0]
            elif op == "aten.arange.start_step":
                start, step = args[0], (args[2] if len(args) > 2 else 1)
            if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (start, step)):
                raise Unsupported("arange with bounds that are not numbers")
            term = f"(float)({ix})" if step == 1 else f"(float)({ix}) * {op_table.c_float(step)}"
            value = f"({op_table.c_float(start)} + {term})" if start else f"({term})"
            if ix == "row":
                raise Unsupported("arange as a per-row value")
            var = self.fresh()
            self.emit(f"const float {var} = {value};")
            return var
        if op in ("aten.zeros.default", "aten.zeros_like.default") or op in op_table.EMPTY_OPS:
            return "0.f"  # an empty tensor's values are whatever memory held: only its shape is ever used
        if op in ("aten.ones.default", "aten.ones_like.default"):
            return "1.f"
        value = args[0] if op == "aten.scalar_tensor.default" else args[1]
        return op_table.c_float(value)

    def _selects_exact(self, node: OpNode, operands: list[str]) -> bool:
        positions = op_table.SELECTING_OPS.get(node.op)
        if positions is None:
            return False
        for p in positions:
            if p >= len(node.args):
                return False
            arg = node.args[p]
            if isinstance(arg, dict):
                if p >= len(operands) or self.exact_in.get(operands[p]) != node.dtype:
                    return False
            elif not op_table.representable(arg, node.dtype):
                return False
        for p in op_table.SELECTING_CONSTANTS.get(node.op, ()):
            value = node.args[p] if p < len(node.args) else None
            if value is not None and not op_table.representable(value, node.dtype):
                return False
        return True

    # -- activation patterns ---------------------------------------------------

    def _member(self, arg: Any, op: str | tuple[str, ...] | None = None) -> OpNode | None:
        if not (isinstance(arg, dict) and "$" in arg) or arg["$"] not in self.members:
            return None
        node = self.index[arg["$"]]
        if op is not None and node.op not in ((op,) if isinstance(op, str) else op):
            return None
        return node

    def softplus_parts(self, where: OpNode) -> tuple[str, str, float, float, str] | None:
        """``where(z > th, x, log1p(exp(z)) / beta)`` with ``z = x * beta``: softplus as aten decomposes it.

        Returns (z, x, beta, threshold, name of the gt node); the intermediates are fp32 members of the
        group with the where's shape (no rounding or broadcasting inside).
        """
        if where.op != "aten.where.self" or len(where.args) < 3 or where.dtype != "float32":
            return None
        gt = self._member(where.args[0], "aten.gt.Scalar")
        low = self._member(where.args[2])
        if gt is None or low is None or not isinstance(where.args[1], dict):
            return None
        th = gt.args[1] if len(gt.args) > 1 else None
        if isinstance(th, bool) or not isinstance(th, (int, float)) or not isinstance(gt.args[0], dict):
            return None
        z = gt.args[0]["$"]
        x = where.args[1]["$"]
        beta = 1.0
        if low.op in ("aten.div.Tensor", "aten.div.Scalar"):
            b = low.args[1] if len(low.args) > 1 else None
            if isinstance(b, bool) or not isinstance(b, (int, float)) or not b or not math.isfinite(b):
                return None
            beta = float(b)
            low = self._member(low.args[0]) if low.dtype == "float32" else None
            if low is None:
                return None
        if low.op != "aten.log1p.default" or low.dtype != "float32":
            return None
        exp = self._member(low.args[0], "aten.exp.default")
        if exp is None or exp.dtype != "float32" or exp.args[0] != {"$": z}:
            return None
        if beta != 1.0:
            mul = self._member({"$": z}, "aten.mul.Tensor")
            if mul is None or mul.dtype != "float32" or mul.args != [{"$": x}, beta]:
                return None
        elif x != z:
            return None
        shapes = {tuple(self.index[n].shape) for n in (z, x, gt.name, exp.name, low.name)}
        if shapes != {tuple(where.shape)}:
            return None
        return z, x, beta, float(th), gt.name

    def _activation(self, node: OpNode, ix: str) -> str | None:
        """Softplus and Mish's tanh(softplus) as one expression each instead of aten's op-by-op decomposition."""
        if node.op == "aten.where.self":
            parts = self.softplus_parts(node)
            if parts is None:
                return None
            z, x, beta, th, _ = parts
            zv, xv = self.value(z, ix), self.value(x, ix)
            if th > 80.0:
                return None  # 1 + e^z would overflow below the threshold
            # log(1 + e^z) for z <= th: within 4e-7 + 1.5e-6 absolute of log1p(exp(z)) (approximate log of an
            # argument >= 1, exp good to a few ulps); z = +Inf / NaN keep eager's answers through the select.
            exp = "stitch_exp_fast" if self.half_outputs else "expf"
            core = f"__logf(1.f + {exp}({zv}))"
            if beta != 1.0:
                core = f"({core} * {op_table.c_float(1.0 / beta)})"
            var = self.fresh()
            self.emit(f"const float {var} = ({zv} > {op_table.c_float(th)} ? {xv} : {core});")
            return var
        if node.op == "aten.tanh.default":
            inner = self._member(node.args[0], "aten.where.self")
            parts = self.softplus_parts(inner) if inner is not None else None
            # tanh(z) rounds to 1.f for z >= 10, so above a threshold that high the select returns 1.
            if parts is None or parts[2] != 1.0 or parts[3] < 10.0 or node.shape != inner.shape:
                return None
            z = parts[0]
            zv = self.value(z, ix)
            # tanh(log1p(e^z)) = n / (n + 2) with n = e^z (e^z + 2): no log, no tanh, no cancellation; z is
            # clamped at 20 (the ratio is 1.f there) so n cannot overflow; NaN passes through the clamp.
            e, n = self.fresh(), self.fresh()
            exp, div = ("stitch_exp_fast", "stitch_div_fast") if self.half_outputs else ("expf", "__fdividef")
            self.emit(f"const float {e} = {exp}({zv} > 20.f ? 20.f : {zv});")
            self.emit(f"const float {n} = {e} * ({e} + 2.f);")
            var = self.fresh()
            self.emit(f"const float {var} = ({zv} > {op_table.c_float(parts[3])} ? 1.f : {div}({n}, {n} + 2.f));")
            return var
        return None

    def _view(self, node: OpNode, ix: str) -> str:
        op = node.op
        args = node.args
        src_name = args[0]["$"] if op != "aten.cat.default" else None
        if op == "aten.cat.default":
            return self._cat(node, ix)
        src = self.index[src_name]
        if ix == "row":
            if src.numel == node.numel and op not in ("aten.permute.default", "aten.t.default", "aten.flip.default",
                                                       "aten.transpose.int", "aten.expand.default",
                                                       "aten.unfold.default", "aten.constant_pad_nd.default",
                                                       "aten.roll.default"):
                return self.value(src_name, "row")
            raise Unsupported(f"{op_table.short(op)} of a per-row value")
        if op == "aten.expand.default":
            return self.value(src_name, broadcast_index(ix, node.shape, src.shape))
        if op in ("aten.permute.default", "aten.t.default", "aten.transpose.int"):
            rank = len(src.shape)
            if op == "aten.t.default":
                perm = [1, 0] if rank == 2 else [0]
            elif op == "aten.transpose.int":
                a, b = args[1] % rank, args[2] % rank
                perm = list(range(rank))
                perm[a], perm[b] = perm[b], perm[a]
            else:
                perm = [p % rank for p in args[1]]
            c = self._coords(ix, node.shape)
            sstr = contiguous_strides(src.shape)
            return self.value(src_name, self._index([(c[d], sstr[perm[d]]) for d in range(rank)]))
        if op == "aten.slice.Tensor":
            rank = len(src.shape)
            dim = (args[1] if len(args) > 1 else 0) % rank
            start = args[2] if len(args) > 2 and args[2] is not None else 0
            step = args[4] if len(args) > 4 else 1
            if start < 0:
                start += src.shape[dim]
            start = max(0, min(start, src.shape[dim]))
            c = self._coords(ix, node.shape)
            sstr = contiguous_strides(src.shape)
            if step != 1:
                c[dim] = Digit(f"({c[dim].expr} * {step}LL)", (c[dim].bound - 1) * step + 1)
            return self.value(src_name, self._index([(c[d], sstr[d]) for d in range(rank)], start * sstr[dim]))
        if op == "aten.repeat.default":
            reps = list(args[1])
            full = (1,) * (len(node.shape) - len(src.shape)) + tuple(src.shape)
            c = self._coords(ix, node.shape)
            sstr = contiguous_strides(full)
            terms = [(Digit(f"({c[d].expr} % {full[d]}LL)" if full[d] != node.shape[d] else c[d].expr, full[d]), sstr[d])
                     for d in range(len(node.shape)) if full[d] > 1]
            return self.value(src_name, self._index(terms))
        if op == "aten.index.Tensor":
            return self._gather(node, src, ix)
        if op == "aten.flip.default":
            rank = len(src.shape)
            flipped = {d % rank for d in args[1]}
            c = self._coords(ix, node.shape)
            sstr = contiguous_strides(src.shape)
            terms = [(Digit(f"({node.shape[d] - 1}LL - {c[d].expr})", node.shape[d]) if d in flipped and node.shape[d] > 1
                      else c[d], sstr[d]) for d in range(rank)]
            return self.value(src_name, self._index(terms))
        if op == "aten.roll.default":
            return self._roll(node, src, ix)
        if op == "aten.unfold.default":
            # Windows of ``size`` every ``step`` along ``dim``, the window's offset as a new last dimension.
            rank = len(src.shape)
            dim, step = args[1] % max(rank, 1), args[3]
            c = self._coords(ix, node.shape)
            sstr = contiguous_strides(src.shape)
            at, offset = c[dim], c[len(node.shape) - 1]
            pos = Digit(f"({at.expr} * {step}LL + {offset.expr})", (at.bound - 1) * step + offset.bound)
            return self.value(src_name, self._index([(pos if d == dim else c[d], sstr[d]) for d in range(rank)]))
        if op == "aten.constant_pad_nd.default":
            return self._pad(node, src, ix)
        if op == "aten.select.int":
            rank = len(src.shape)
            dim = args[1] % rank
            pos = args[2] % src.shape[dim]
            c = self._coords(ix, node.shape)
            sstr = contiguous_strides(src.shape)
            terms = [(c[d if d < dim else d - 1], sstr[d]) for d in range(rank) if d != dim]
            return self.value(src_name, self._index(terms, pos * sstr[dim]))
        # Same elements, same order: view / reshape / unsqueeze / squeeze / alias / clone / detach.
        if src.numel != node.numel:
            raise Unsupported(f"{op_table.short(op)} changes the element count")
        return self.value(src_name, ix)

    def _roll(self, node: OpNode, src: OpNode, ix: str) -> str:
        """``torch.roll``: output element i along a rolled dimension of size n is the source's (i - shift) mod n;
        with no dimensions named, the flattened tensor is rolled."""
        shifts = node.args[1] if len(node.args) > 1 else []
        dims = node.args[2] if len(node.args) > 2 else []
        shifts = [shifts] if isinstance(shifts, int) else list(shifts)
        dims = [dims] if isinstance(dims, int) else list(dims)
        if not dims:
            n = src.numel
            back = (-shifts[0]) % n if n else 0
            if back == 0:
                return self.value(node.args[0]["$"], ix)
            flat = self._index([(c, s) for c, s in zip(self._coords(ix, node.shape),
                                                       contiguous_strides(node.shape))])
            return self.value(node.args[0]["$"], self._as_var(f"(({flat} + {back}LL) % {n}LL)"))
        rank = len(src.shape)
        back = {}
        for shift, dim in zip(shifts, dims):
            d = dim % rank
            back[d] = (back.get(d, 0) - shift) % src.shape[d] if src.shape[d] else 0
        c = self._coords(ix, node.shape)
        sstr = contiguous_strides(src.shape)
        terms = [(Digit(f"(({c[d].expr} + {back[d]}LL) % {src.shape[d]}LL)", src.shape[d]) if back.get(d) else c[d],
                  sstr[d]) for d in range(rank)]
        return self.value(node.args[0]["$"], self._index(terms))

    def _pad(self, node: OpNode, src: OpNode, ix: str) -> str:
        """``F.pad`` with a constant: the source element where the padded position falls inside it, else the
        constant. The load reads a clamped position, so a padded element never reads outside the source."""
        pads = list(node.args[1])
        fill = node.args[2] if len(node.args) > 2 and node.args[2] is not None else 0.0
        rank = len(src.shape)
        c = self._coords(ix, node.shape)
        sstr = contiguous_strides(src.shape)
        terms, inside = [], []
        for d in range(rank):
            k = rank - 1 - d  # pads run from the last dimension back: (last's before, last's after, ...)
            before = pads[2 * k] if 2 * k < len(pads) else 0
            if before == 0 and node.shape[d] == src.shape[d]:
                terms.append((c[d], sstr[d]))
                continue
            pos, last = f"({c[d].expr} - {before}LL)", src.shape[d] - 1
            inside.append(f"({pos} >= 0LL && {pos} <= {last}LL)")
            terms.append((Digit(f"({pos} < 0LL ? 0LL : {pos} > {last}LL ? {last}LL : {pos})", src.shape[d]), sstr[d]))
        if any(n == 0 for n in src.shape):
            raise Unsupported("padding an empty tensor")
        loaded = self.value(node.args[0]["$"], self._index(terms))
        if not inside:
            return loaded
        var = self.fresh()
        self.emit(f"const float {var} = ({' && '.join(inside)}) ? {loaded} : {op_table.c_float(fill)};")
        return var

    def _gather(self, node: OpNode, src: OpNode, ix: str) -> str:
        """``x[..., i, j, ...]`` with index tensors on neighbouring dims (nearest upsampling's, say): the
        element's coordinates there are the index tensors' values at its position in their broadcast shape."""
        idx = node.args[1]
        dims = [k for k, t in enumerate(idx) if t is not None]
        if not dims or dims != list(range(dims[0], dims[-1] + 1)):
            raise Unsupported("indexing with tensors on dimensions that are not neighbours")
        first = dims[0]
        nb = len(node.shape) - len(src.shape) + len(dims)  # dims of the index tensors' broadcast shape
        bshape = tuple(node.shape[first:first + nb])
        c = self._coords(ix, node.shape)
        bstr = contiguous_strides(bshape)
        b_ix = self._index([(c[first + d], bstr[d]) for d in range(nb)])
        picked = []
        for k in dims:
            t = self.index[idx[k]["$"]]
            if t.dtype not in ("int64", "int32"):
                raise Unsupported("indexing with a boolean mask")
            v = self.value(t.name, broadcast_index(b_ix, bshape, tuple(t.shape)))
            size = src.shape[k]
            var = self.fresh("i")
            # An index below zero counts from the end, as in eager.
            self.emit(f"const long long {var} = (long long)({v}) < 0 ? (long long)({v}) + {size}LL : (long long)({v});")
            picked.append(Digit(var, size))
        coords = c[:first] + picked + c[first + nb:]
        sstr = contiguous_strides(src.shape)
        return self.value(src.name, self._index([(coords[d], sstr[d]) for d in range(len(src.shape))]))

    def _as_var(self, expr: str) -> str:
        if expr.replace("_", "").isalnum():
            return expr
        var = self.fresh("i")
        self.emit(f"const long long {var} = {expr};")
        self.var_defs[var] = expr
        return var

    def _coords(self, ix: str, shape: tuple[int, ...]) -> list[Digit]:
        """The coordinates of ``ix`` in ``shape``; taken from ``ix``'s own digits when they line up."""
        form = self.forms.get(ix)
        if form is not None:
            aligned = _align(form, tuple(shape))
            if aligned is not None:
                return aligned
        c = coords(ix, shape)
        return [Digit(c[d], shape[d], (ix, tuple(shape), d) if shape[d] > 1 else None) for d in range(len(shape))]

    def _index(self, terms: list[tuple[Digit, int]], offset: int = 0) -> str:
        """An index variable for sum(digit * stride) + offset: ``root + k`` when the digits are all of one root."""
        live = [(g, st) for g, st in terms if st != 0 and g.expr != "0"]
        expr = None
        origins = {g.origin[:2] if g.origin else None for g, _ in live}
        if live and len(origins) == 1 and None not in origins:
            (root, shape), = origins
            sstr = contiguous_strides(shape)
            dims = sorted(g.origin[2] for g, _ in live)
            if dims == [d for d in range(len(shape)) if shape[d] > 1] and all(
                    st == sstr[g.origin[2]] for g, st in live):
                k = offset - sum(g.shift * st for g, st in live)
                expr = root if k == 0 else (f"({root} + {k}LL)" if k > 0 else f"({root} - {-k}LL)")
        if expr is None:
            expr = linear([(g.expr, st) for g, st in terms], offset)
        var = self._as_var(expr)
        if var != expr:
            self.forms[var] = (tuple(terms), offset)
        return var

    def expand(self, ix: str) -> str:
        """``ix`` with the index variables it names written out."""
        for _ in range(8):
            new = re.sub(r"\bi\d+\b", lambda m: f"({self.var_defs[m.group(0)]})" if m.group(0) in self.var_defs
                         else m.group(0), ix)
            if new == ix:
                break
            ix = new
        return ix

    def mark_exact(self) -> None:
        """``exact``: members whose value feeds a comparison, a rounding or an integer result in the group.

        Softplus's own threshold test is not one when the threshold is 15 or more: the two sides of the
        select meet there to within log1p(e^-15) = 3e-7, so a last-ulp flip of the test cannot show."""
        continuous = set()
        for n in self.members:
            parts = self.softplus_parts(self.index[n])
            if parts is not None and parts[3] >= 15.0:
                continuous.add(parts[4])
        todo = [n for n in self.members if n not in continuous and (
                self.index[n].op in op_table.DISCRETE_OPS or self.index[n].dtype not in op_table.FLOAT_DTYPES)]
        exact: set[str] = set()
        while todo:
            n = todo.pop()
            for r in self.index[n].refs():
                if r in self.members and r not in exact:
                    exact.add(r)
                    todo.append(r)
        self.exact = exact
