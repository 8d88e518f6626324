"""The ``# stitch:`` template the shape quick fix inserts: shapes that agree with what the selection does.

A template is a starting point the user edits, so it must never propose shapes
the selection cannot run with (``x @ w`` with ``w``'s first dimension other than
``x``'s last). Shapes no source gives are named dimensions with one default
each (``B=8, D=1024, N=1024, x=[B,D] float32, w=[D,N] float32``): the comment
parses as written, and changing ``D`` in one place keeps every shape consistent.

The selection is read statically (``ast``, nothing run): matmuls, linear layers
and norms tie dimensions together, per-channel operands (``b``, ``scale``) get
the last dimension, other operands of an elementwise op get its full shape.
"""

from __future__ import annotations

import ast
import re

from stitch_lsp.task.shape_values import DTYPES, int_value
from stitch_lsp.analysis.python_region import Region

class _Var:
    """A dimension not known yet: equated with others as the selection's ops require, then either
    bound to a size the code fixes or written as a named dimension with a default size."""

    def __init__(self, name: str, size: int, order: int) -> None:
        self.name, self.size, self.order = name, size, order


Dim = int | str | _Var  # a size, a size expression of __init__ arguments (``dim*4``), or a variable
Shape = list[Dim]

# Operands that are usually per-channel vectors when combined elementwise with a tensor.
_PER_CHANNEL = re.compile(r"^(b|g|bias|scale|gamma|beta|shift|alpha|weight)$|(_?(bias|scale|gamma|beta|shift))$", re.I)
_SAME_SHAPE = {
    "relu", "relu_", "gelu", "silu", "sigmoid", "tanh", "exp", "exp2", "log", "log1p", "log2", "abs", "neg",
    "sqrt", "rsqrt", "softmax", "log_softmax", "dropout", "float", "half", "bfloat16", "double", "to",
    "contiguous", "clone", "clamp", "clamp_min", "clamp_max", "leaky_relu", "elu", "selu", "celu",
    "softplus", "mish", "hardswish", "hardsigmoid", "hardtanh", "relu6", "erf", "sin", "cos", "square",
    "reciprocal", "detach", "type_as", "sign", "floor", "ceil", "round", "trunc", "logit", "softsign",
    "tanhshrink", "silu_", "sigmoid_", "tanh_", "exp_", "clamp_", "nan_to_num", "cumsum", "cumprod",
    "normalize", "glu_", "square_", "abs_", "neg_",
}
_ELEMENTWISE = {"add", "sub", "subtract", "mul", "multiply", "div", "divide", "true_divide", "maximum",
                "minimum", "pow", "fmax", "fmin", "atan2", "hypot", "add_", "sub_", "mul_", "div_",
                "lerp", "eq", "ne", "lt", "le", "gt", "ge", "logical_and", "logical_or", "copysign"}
_REDUCE = {"sum", "mean", "amax", "amin", "max", "min", "logsumexp", "var", "std", "prod", "norm",
           "argmax", "argmin", "all", "any", "nansum", "nanmean"}
_SHAPE_MODULES = {"GELU", "ReLU", "SiLU", "Sigmoid", "Tanh", "Dropout", "Identity", "Softmax", "LogSoftmax",
                  "LeakyReLU", "ELU", "Mish", "Hardswish", "Softplus", "ReLU6", "Hardtanh", "SELU", "CELU"}
_NORM_MODULES = {"LayerNorm", "RMSNorm"}


class _Free:
    """An input of the selection whose shape is not decided yet (``transposed``: read as ``w.T``)."""

    def __init__(self, name: str, transposed: bool = False) -> None:
        self.name = name
        self.transposed = transposed


def _t(shape: Shape) -> Shape:
    return shape[:-2] + [shape[-1], shape[-2]] if len(shape) >= 2 else shape


class _Scalar:
    pass


SCALAR = _Scalar()


class _Infer:
    def __init__(self, region: Region, known: dict[str, tuple[tuple[int, ...], str]], values: dict[str, str]) -> None:
        self.region = region
        self.shapes: dict[str, Shape] = {n: list(s) for n, (s, _) in known.items() if n in region.inputs}
        self.dtypes: dict[str, str] = {n: d for n, (_, d) in known.items() if n in region.inputs}
        self.free = [n for n in region.inputs if n not in self.shapes]
        self.locals: dict[str, object] = {}
        self.vars: list[_Var] = []  # in order of creation
        self.bound: dict[_Var, Dim] = {}  # union-find: a variable -> what it equals
        self.param_vars: dict[str, _Var] = {}  # __init__ arguments with no value, by name
        self.values = _int_values(values)
        self.taken = set(region.inputs) | set(region.function_params) | {p for p, _ in region.init_params}
        self.taken |= set(re.findall(r"\b[A-Za-z_]\w*\b", region.body))
        self.taken |= set(values)
        self.default: Shape | None = None
        self.ints: dict[str, _Var] = {}  # names the code uses as sizes (``B, T, C = x.size()``, ``view(B, T)``)
        self.attr_dims: dict[str, _Var] = {}  # ``self.n_head`` used as a size
        floats = [d for d in self.dtypes.values() if d.startswith(("float", "bfloat"))]
        self.float_dtype = floats[0] if floats else _parameter_dtype(region) or "float32"

    # -- dimensions ------------------------------------------------------------------------
    def symbol(self, preferred: str, size: int) -> _Var:
        name, i = preferred, 2
        while name in self.taken:
            name, i = f"{preferred}{i}", i + 1
        self.taken.add(name)
        var = _Var(name, size, len(self.vars))
        self.vars.append(var)
        return var

    def named(self, name: str, size: int) -> _Var:
        """A dimension with the user's own name (``T`` of ``B, T, C = x.size()``): an int input too."""
        self.taken.add(name)
        var = _Var(name, size, len(self.vars))
        self.vars.append(var)
        return var

    def size_arg(self, node: ast.AST) -> Dim:
        """A size passed to ``view`` / ``reshape``: a number, a name the code uses as a size, or a new dimension."""
        if isinstance(node, ast.Constant) and isinstance(node.value, int) and node.value > 0:
            return node.value
        if isinstance(node, ast.Name):
            if node.id in self.ints:
                return self.ints[node.id]
            if node.id in self.values:
                return self.values[node.id]
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self":
            if node.attr not in self.attr_dims:
                self.attr_dims[node.attr] = self.symbol(node.attr, 8)
            return self.attr_dims[node.attr]
        key = ast.unparse(node)
        if key not in self.attr_dims:  # the same expression (``C // self.n_head``) is the same size
            self.attr_dims[key] = self.symbol("D", 64)
        return self.attr_dims[key]

    def unpack_sizes(self, target: ast.AST, value: ast.AST) -> bool:
        """``B, T, C = x.size()`` / ``x.shape``: ``x`` has that rank, and B, T, C are ints (its sizes)."""
        src = _size_source(value)
        if src is None or not isinstance(target, (ast.Tuple, ast.List)):
            if src is None and isinstance(target, ast.Name) and _size_index(value):
                self.ints.setdefault(target.id, self.named(target.id, 256))
                return True
            return False
        n = len(target.elts)
        defaults = {1: [1024], 2: [8, 1024], 3: [8, 256, 1024], 4: [8, 16, 256, 64]}.get(n, [8] * n)
        dims: Shape = []
        for elt, size in zip(target.elts, defaults):
            if isinstance(elt, ast.Name) and elt.id != "_":
                var = self.ints.get(elt.id) or self.named(elt.id, size)
                self.ints[elt.id] = var
                if elt.id in self.free:
                    self.free.remove(elt.id)
            else:
                var = self.symbol("D", size)
            dims.append(var)
        if src in self.free:
            self.assign(src, dims)
        elif isinstance(self.shapes.get(src), list) and len(self.shapes[src]) == n:
            for a, b in zip(self.shapes[src], dims):
                self.unify(a, b)
        elif isinstance(self.locals.get(src), list) and len(self.locals[src]) == n:
            for a, b in zip(self.locals[src], dims):
                self.unify(a, b)
        else:
            self.locals[src] = dims
        return True

    def find_ints(self, tree: ast.AST) -> None:
        """Inputs the code uses as sizes: ``view(B, T, ...)`` arguments, slice bounds (``[:T]``), ``range(n)``."""
        for node in ast.walk(tree):
            names: list[ast.AST] = []
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in _SIZE_ARGS:
                names = list(node.args)
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "range":
                names = list(node.args)
            elif isinstance(node, ast.Slice):
                names = [n for n in (node.lower, node.upper, node.step) if n is not None]
            for n in names:
                for leaf in ast.walk(n):
                    if isinstance(leaf, ast.Name) and leaf.id in self.free and leaf.id not in self.ints:
                        self.free.remove(leaf.id)
                        self.ints[leaf.id] = self.named(leaf.id, 256)

    def find(self, d: Dim) -> Dim:
        while isinstance(d, _Var) and d in self.bound:
            d = self.bound[d]
        return d

    def unify(self, a: Dim, b: Dim) -> None:
        """Record that two dimensions are equal (a size the code fixes wins; else the older name)."""
        a, b = self.find(a), self.find(b)
        if a is b or (not isinstance(a, _Var) and a == b):
            return
        if isinstance(a, _Var) and isinstance(b, _Var):
            older, newer = (a, b) if a.order <= b.order else (b, a)
            self.bound[newer] = older
        elif isinstance(a, _Var):
            self.bound[a] = b
        elif isinstance(b, _Var):
            self.bound[b] = a
        # Two different sizes: the user's code or a guess disagrees; the template keeps the first.

    def unify_tail(self, a: Shape, b: Shape, count: int | None = None) -> None:
        """Equate the last ``count`` dimensions (all that both have by default), broadcasting 1s aside."""
        n = min(len(a), len(b)) if count is None else min(count, len(a), len(b))
        for x, y in zip(a[len(a) - n:], b[len(b) - n:]):
            if self.find(x) != 1 and self.find(y) != 1:
                self.unify(x, y)

    def render(self, d: Dim) -> int | str:
        d = self.find(d)
        if isinstance(d, _Var):
            return d.name
        if isinstance(d, str):  # an expression of __init__ arguments: those now known become numbers
            env = {n: v for n, var in self.param_vars.items() if isinstance(v := self.find(var), int)}
            size = int_value(ast.parse(d, mode="eval"), env) if env else None
            if size is not None:
                return size
            return ast.unparse(_Substitute(env).visit(ast.parse(d, mode="eval"))).replace(" ", "")
        return d

    def default_shape(self) -> Shape:
        # Unrelated inputs share one default shape, so they combine without a broadcasting error.
        if self.default is None:
            if _unpacked_rank(self.region) == 3:  # the submodules read (B, T, C) = x.size()
                self.default = [self.symbol("B", 8), self.symbol("T", 256), self.symbol("D", 1024)]
            else:
                self.default = [self.symbol("B", 8), self.symbol("D", 1024)]
        return list(self.default)

    def dim_of(self, node: ast.AST | None, fallback: str) -> Dim:
        """A size written in the module's code (``hidden``, ``4 * hidden``, ``256``)."""
        if node is not None:
            try:
                v = int_value(node, self.values)
                if v is not None:
                    return v
            except (ValueError, TypeError, ZeroDivisionError):
                pass
            params = {p for p, _ in self.region.init_params}
            # ``config.n_embd`` of an __init__ argument: a size of its own, written that way in the comment.
            node = _Dotted(params - set(self.values)).visit(ast.parse(ast.unparse(node), mode="eval")).body
            names = [n.id for n in ast.walk(node) if isinstance(n, ast.Name)]
            if names and all(n in self.values or n in params or n.split(".")[0] in params for n in names):
                # __init__ arguments with no value yet: the comment defines them (build_task reads them
                # there), and a size computed from them is written as that expression (``dim*4``).
                for n in names:
                    if n not in self.values and n not in self.param_vars:
                        self.taken.discard(n)
                        self.param_vars[n] = self.symbol(n, attribute_default(n) if "." in n else 1024)
                if isinstance(node, ast.Name):
                    return self.param_vars[node.id]
                known = _Substitute(self.values).visit(ast.parse(ast.unparse(node), mode="eval"))
                return ast.unparse(known).replace(" ", "")
        return self.symbol(fallback, 1024)

    # -- values ----------------------------------------------------------------------------
    def assign(self, name: str, shape: Shape, dtype: str | None = None) -> Shape:
        if name in self.free:
            self.free.remove(name)
            self.shapes[name] = list(shape)
            if dtype:
                self.dtypes[name] = dtype
        return self.shapes.get(name, shape)

    def force(self, v) -> object:
        if isinstance(v, _Free):
            shape = self.assign(v.name, self.default_shape())
            return _t(shape) if v.transposed else shape
        return v

    def like(self, v, other: Shape) -> object:
        """``v`` combined elementwise with a tensor of shape ``other``."""
        if isinstance(v, _Free):
            if _PER_CHANNEL.search(v.name) and len(other) > 1:
                return self.tensor(v, other[-1:])
            if len(other) == 1:  # a per-channel vector (a parameter): v is the activation it scales
                return self.tensor(v, [self.default_shape()[0]] + other)
            return self.tensor(v, other)
        return v

    def tensor(self, v, shape: Shape, dtype: str | None = None, tail: int | None = None) -> object:
        """``v`` where a tensor of ``shape`` is wanted: a free input takes that shape; a known one has
        its last ``tail`` dimensions (all by default) equated with it."""
        if isinstance(v, _Free):
            got = self.assign(v.name, _t(shape) if v.transposed else shape, dtype)
            return _t(got) if v.transposed else got
        if isinstance(v, list):
            self.unify_tail(v, shape, tail)
        return v

    def value(self, node: ast.AST | None):
        if node is None:
            return None
        if isinstance(node, ast.Constant):
            return SCALAR if isinstance(node.value, (int, float, bool)) else None
        if isinstance(node, ast.Name):
            if node.id in self.ints:
                return SCALAR
            if node.id in self.locals:
                return self.locals[node.id]
            if node.id in self.shapes:
                return self.shapes[node.id]
            if node.id in self.free:
                return _Free(node.id)
            return None
        if isinstance(node, ast.BinOp):
            left, right = self.value(node.left), self.value(node.right)
            if isinstance(node.op, ast.MatMult):
                return self.matmul(left, right)
            return self.elementwise(left, right)
        if isinstance(node, ast.Compare) and len(node.comparators) == 1:
            return self.elementwise(self.value(node.left), self.value(node.comparators[0]))
        if isinstance(node, ast.UnaryOp):
            return self.force(self.value(node.operand))
        if isinstance(node, ast.Attribute):
            if isinstance(node.value, ast.Name) and node.value.id == "self":
                return self.parameter(node.attr)
            base = self.value(node.value)
            if node.attr in ("T", "mT") and isinstance(base, _Free):
                return _Free(base.name, not base.transposed)
            base = self.force(base)
            if node.attr in ("T", "mT") and isinstance(base, list) and len(base) >= 2:
                return _t(base)
            return None
        if isinstance(node, ast.Call):
            return self.call(node)
        if isinstance(node, ast.Subscript):
            self.force(self.value(node.value))
            return None
        for child in ast.iter_child_nodes(node):
            self.force(self.value(child))
        return None

    def elementwise(self, left, right):
        if isinstance(left, _Free) and isinstance(right, _Free):
            left = self.force(left)
        if isinstance(left, list):
            right = self.like(right, left)
        if isinstance(right, list):
            left = self.like(left, right)
        left, right = self.force(left), self.force(right)
        if isinstance(left, list) and isinstance(right, list):
            self.unify_tail(left, right)
            return _broadcast(left, right)
        if isinstance(left, list) and right is SCALAR:
            return left
        if isinstance(right, list) and left is SCALAR:
            return right
        if left is SCALAR and right is SCALAR:
            return SCALAR
        return None

    def matmul(self, left, right):
        if isinstance(left, _Free):
            if isinstance(right, list) and right:
                left = self.tensor(left, [self.default_shape()[0], right[-2] if len(right) >= 2 else right[0]])
            else:
                left = self.force(left)
        if isinstance(right, _Free):
            if isinstance(left, list) and left:
                right = self.tensor(right, [left[-1], self.symbol("N", 1024)])
            else:
                right = self.force(right)
        if not (isinstance(left, list) and isinstance(right, list) and left and right):
            return None
        self.unify(left[-1], right[-2] if len(right) >= 2 else right[0])
        if len(right) == 1:
            return left[:-1]
        if len(left) == 1:
            return right[:-2] + right[-1:]
        return _broadcast(left[:-2], right[:-2]) + [left[-2], right[-1]]

    def parameter(self, attr: str):
        need = next((n for n in self.region.self_needs if n.name == attr), None)
        if need is None or need.kind not in ("parameter", "buffer", "attribute"):
            return None
        try:
            call = ast.parse(need.init_source, mode="eval").body
        except SyntaxError:
            return None
        while True:  # nn.Parameter(0.5 * torch.randn(d).to(dtype)) -> torch.randn(d)
            if isinstance(call, ast.Call) and _callee(call).endswith("Parameter") and call.args:
                call = call.args[0]
            elif isinstance(call, ast.BinOp) and isinstance(call.left, ast.Constant):
                call = call.right
            elif isinstance(call, ast.BinOp) and isinstance(call.right, ast.Constant):
                call = call.left
            elif isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) \
                    and call.func.attr in ("to", "float", "half", "bfloat16", "contiguous", "clone", "cuda"):
                call = call.func.value
            else:
                break
        if isinstance(call, ast.Call) and _callee(call).split(".")[-1] in ("randn", "rand", "ones", "zeros", "empty", "full"):
            args = call.args[:1] if _callee(call).endswith("full") else call.args
            if len(args) == 1 and isinstance(args[0], (ast.Tuple, ast.List)):
                args = list(args[0].elts)
            return [self.dim_of(a, "C") for a in args]
        if isinstance(call, ast.Constant) and isinstance(call.value, (int, float)):
            return SCALAR
        return None

    def module(self, attr: str, args: list):
        need = next((n for n in self.region.self_needs if n.name == attr), None)
        x = args[0] if args else None
        try:
            ctor = ast.parse(need.init_source, mode="eval").body if need is not None else None
        except SyntaxError:
            ctor = None
        kind = _callee(ctor).split(".")[-1] if isinstance(ctor, ast.Call) else ""
        if kind == "Linear" and len(ctor.args) >= 2:
            fan_in, fan_out = self.dim_of(ctor.args[0], "K"), self.dim_of(ctor.args[1], "N")
            x = self.tensor(x, self.default_shape()[:-1] + [fan_in], tail=1)
            return x[:-1] + [fan_out] if isinstance(x, list) and x else None
        if kind in _NORM_MODULES and ctor.args:
            width = self.dim_of(ctor.args[0], "D")
            return self.tensor(x, self.default_shape()[:-1] + [width], tail=1)
        if kind == "Embedding" and len(ctor.args) >= 2:
            x = self.tensor(x, [self.default_shape()[0], self.symbol("T", 128)], "int64")
            return x + [self.dim_of(ctor.args[1], "D")] if isinstance(x, list) else None
        for a in args:
            self.force(a)
        return x if kind in _SHAPE_MODULES and isinstance(x, list) else None

    def call(self, node: ast.Call):
        func = node.func
        kwargs = {k.arg: k.value for k in node.keywords if k.arg}
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == "self":
            return self.module(func.attr, [self.value(a) for a in node.args])
        name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
        receiver = None
        if isinstance(func, ast.Attribute):
            receiver = self.value(func.value)  # None for modules (torch, F): their names are not tensors
        args = ([receiver] if receiver is not None else []) + [self.value(a) for a in node.args]
        if name == "bmm" and len(args) >= 2:
            left, right = args[0], args[1]
            if isinstance(left, _Free):
                batch = right[:1] if isinstance(right, list) and len(right) == 3 else [self.symbol("H", 16)]
                k = right[1] if isinstance(right, list) and len(right) == 3 else self.default_shape()[1]
                left = self.tensor(left, batch + [self.default_shape()[0], k])
            if isinstance(right, _Free) and isinstance(left, list) and len(left) == 3:
                right = self.tensor(right, [left[0], left[2], self.symbol("N", 1024)])
            return self.matmul(left, right)
        if name in ("matmul", "mm") and len(args) >= 2:
            return self.matmul(args[0], args[1])
        if name == "linear" and len(args) >= 2:
            x = self.force(args[0])
            width = x[-1] if isinstance(x, list) and x else self.default_shape()[1]
            w = self.tensor(args[1], [self.symbol("N", 1024), width])
            bias = args[2] if len(args) > 2 else self.value(kwargs.get("bias"))
            if isinstance(w, list) and len(w) == 2:
                self.tensor(bias, [w[0]])
                return x[:-1] + [w[0]] if isinstance(x, list) else None
            return None
        if name in ("layer_norm", "rms_norm", "group_norm") and args:
            x = self.force(args[0])
            for a in args[1:] + [self.value(kwargs.get(k)) for k in ("weight", "bias")]:
                if isinstance(x, list) and x:
                    self.tensor(a, x[-1:] if name != "group_norm" else x[1:2])
            return x
        if name in ("cross_entropy", "nll_loss") and len(args) >= 2:
            logits = self.force(args[0])
            if isinstance(logits, list) and logits:
                self.tensor(args[1], logits[:-1] if len(logits) == 2 else logits[:1] + logits[2:], "int64")
            return []
        if name == "where" and len(args) == 3:
            out = self.elementwise(args[1], args[2])
            self.tensor(args[0], out, "bool") if isinstance(out, list) else self.force(args[0])
            return out
        if name in _ELEMENTWISE and len(args) >= 2:
            out = self.elementwise(args[0], args[1])
            for a in args[2:]:
                self.like(a, out) if isinstance(out, list) else self.force(a)
            return out
        if name in _SAME_SHAPE and args:
            x = self.force(args[0])
            for a in args[1:]:
                self.force(a)
            return x if isinstance(x, list) else None
        if name in _REDUCE and args:
            x = self.force(args[0])
            for a in args[1:]:
                self.force(a)
            dim = kwargs.get("dim", node.args[0] if receiver is not None and node.args else
                             node.args[1] if len(node.args) > 1 else None)
            keep = kwargs.get("keepdim")
            return _reduced(x, dim, isinstance(keep, ast.Constant) and keep.value is True)
        if (name == "view" or (name == "reshape" and receiver is not None)) and node.args:
            self.force(receiver)
            dims = node.args[0].elts if len(node.args) == 1 and isinstance(node.args[0], (ast.Tuple, ast.List)) \
                else node.args
            return [self.size_arg(d) for d in dims]
        if name == "transpose" and receiver is not None and len(node.args) == 2:
            x = self.force(receiver)
            a, b = (_const_int(d) for d in node.args)
            if isinstance(x, list) and a is not None and b is not None and -len(x) <= min(a, b) and max(a, b) < len(x):
                y = list(x)
                y[a], y[b] = y[b], y[a]
                return y
        if name in ("split", "chunk") and receiver is not None:
            x = self.force(receiver)
            dim = kwargs.get("dim", node.args[1] if len(node.args) > 1 else None)
            d = _const_int(dim) if dim is not None else 0
            if isinstance(x, list) and d is not None and -len(x) <= d < len(x):
                y = list(x)
                y[d] = self.symbol("D", 64)
                return _Parts(y)
            return None
        if name == "t" and len(args) == 1 and isinstance(args[0], _Free):
            return _Free(args[0].name, not args[0].transposed)
        if name in ("t", "transpose") and args:
            x = self.force(args[0])
            return x[:-2] + [x[-1], x[-2]] if isinstance(x, list) and len(x) >= 2 else None
        if name == "unsqueeze" and args:
            x = self.force(args[0])
            dim = node.args[0] if receiver is not None and node.args else node.args[1] if len(node.args) > 1 else None
            if isinstance(x, list) and isinstance(dim, ast.Constant) and isinstance(dim.value, int):
                d = dim.value if dim.value >= 0 else len(x) + 1 + dim.value
                return x[:d] + [1] + x[d:]
            return None
        for a in args:
            self.force(a)
        for v in kwargs.values():
            self.force(self.value(v))
        return None

    def statement(self, stmt: ast.stmt) -> None:
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and self.unpack_sizes(stmt.targets[0], stmt.value):
            return
        if isinstance(stmt, ast.Assign):
            v = self.value(stmt.value)
            for target in stmt.targets:
                self.bind(target, v)
        elif isinstance(stmt, ast.AugAssign):
            target = self.value(stmt.target)
            self.elementwise(target, self.value(stmt.value)) if not isinstance(stmt.op, ast.MatMult) \
                else self.matmul(target, self.value(stmt.value))
        elif isinstance(stmt, ast.AnnAssign) and stmt.value is not None:
            self.bind(stmt.target, self.value(stmt.value))
        elif isinstance(stmt, (ast.Expr, ast.Return)) and stmt.value is not None:
            v = stmt.value
            for e in (v.elts if isinstance(v, ast.Tuple) else [v]):
                self.force(self.value(e))

    def bind(self, target: ast.AST, v) -> None:
        if isinstance(target, ast.Name):
            self.locals[target.id] = self.force(v) if not isinstance(v, _Parts) else list(v.shape)
        elif isinstance(target, (ast.Tuple, ast.List)):
            for t in target.elts:
                self.bind(t, list(v.shape) if isinstance(v, _Parts) else None)


class _Dotted(ast.NodeTransformer):
    """``config.n_embd`` (an __init__ argument's field) -> one name, ``config.n_embd``."""

    def __init__(self, params: set[str]) -> None:
        self.params = params

    def visit_Attribute(self, node: ast.Attribute) -> ast.AST:
        if isinstance(node.value, ast.Name) and node.value.id in self.params:
            return ast.Name(id=f"{node.value.id}.{node.attr}", ctx=ast.Load())
        return self.generic_visit(node)


def attribute_default(dotted: str) -> int | float | bool:
    """A starting value for a config field the template proposes (the user edits it): by what its name says."""
    name = dotted.rsplit(".", 1)[-1].lower()
    if "drop" in name:
        return 0.0
    if name in ("bias", "flash") or name.startswith(("use_", "is_", "has_")):
        return True
    if "eps" in name:
        return 1e-5
    if "head" in name:
        return 8
    if "layer" in name:
        return 2
    return 1024


class _Substitute(ast.NodeTransformer):
    def __init__(self, values: dict[str, int]) -> None:
        self.values = values

    def visit_Name(self, node: ast.Name) -> ast.AST:
        return ast.Constant(self.values[node.id]) if node.id in self.values else node


_SIZE_ARGS = {"view", "reshape", "expand", "repeat", "new_zeros", "new_ones", "new_empty", "new_full", "unflatten"}


class _Parts:
    """What ``split`` / ``chunk`` give: several tensors of one shape (the split dimension a new size)."""

    def __init__(self, shape: Shape) -> None:
        self.shape = shape


_UNPACK = re.compile(r"^\s*([A-Za-z_]\w*(?:\s*,\s*[A-Za-z_]\w*)+)\s*=\s*[A-Za-z_]\w*\.(?:size\(\s*\)|shape)\s*(?:#.*)?$", re.M)


def _unpacked_rank(region: Region) -> int | None:
    """The rank the file's classes the selection uses unpack their input into (``B, T, C = x.size()``)."""
    for text in region.helpers.values():
        m = _UNPACK.search(text)
        if m:
            return len(m.group(1).split(","))
    return None


def _const_int(node: ast.AST | None) -> int | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        inner = _const_int(node.operand)
        return -inner if inner is not None else None
    return None


def _size_source(node: ast.AST) -> str | None:
    """``x`` of ``x.size()`` or ``x.shape``."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "size" \
            and not node.args and isinstance(node.func.value, ast.Name):
        return node.func.value.id
    if isinstance(node, ast.Attribute) and node.attr == "shape" and isinstance(node.value, ast.Name):
        return node.value.id
    return None


def _size_index(node: ast.AST) -> bool:
    """``x.size(i)`` or ``x.shape[i]``."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "size" and node.args:
        return True
    return isinstance(node, ast.Subscript) and _size_source(node.value) is not None


def _parameter_dtype(region: Region) -> str | None:
    """The float dtype the module's used parameters are made in (``dtype=torch.bfloat16`` or a
    constant naming it): inputs usually match it, and mixing them fails in eager."""
    for need in region.self_needs:
        m = re.search(r"\bdtype\s*=\s*([\w.]+)", need.init_source)
        if not m:
            continue
        name = m.group(1)
        if name in region.module_names:  # DTYPE = torch.bfloat16
            c = re.search(r"=\s*torch\.(\w+)\s*$", region.module_names[name].strip())
            name = "torch." + c.group(1) if c else name
        dtype = DTYPES.get(name.removeprefix("torch."))
        if dtype and dtype.startswith(("float", "bfloat")):
            return dtype
    return None


def _callee(call: ast.AST) -> str:
    try:
        return ast.unparse(call.func)
    except AttributeError:
        return ""


def _int_values(values: dict[str, str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for name, text in values.items():
        try:
            v = ast.literal_eval(text)
        except (ValueError, SyntaxError):
            continue
        if isinstance(v, int) and not isinstance(v, bool):
            out[name] = v
    return out


def _broadcast(a: Shape, b: Shape) -> Shape:
    n = max(len(a), len(b))
    a, b = [1] * (n - len(a)) + a, [1] * (n - len(b)) + b
    return [y if x == 1 else x for x, y in zip(a, b)]


def _reduced(x, dim: ast.AST | None, keep: bool):
    if not isinstance(x, list):
        return None
    if dim is None:
        return []
    dims = dim.elts if isinstance(dim, (ast.Tuple, ast.List)) else [dim]
    axes = set()
    for d in dims:
        if isinstance(d, ast.UnaryOp) and isinstance(d.op, ast.USub) and isinstance(d.operand, ast.Constant):
            axes.add(len(x) - d.operand.value)
        elif isinstance(d, ast.Constant) and isinstance(d.value, int):
            axes.add(d.value)
        else:
            return None
    return [1 if i in axes else s for i, s in enumerate(x)] if keep else [s for i, s in enumerate(x) if i not in axes]


def template_shapes(region: Region, known: dict[str, tuple[tuple[int, ...], str]],
                    values: dict[str, str] | None = None) -> tuple[dict[str, int], dict[str, tuple[Shape, str]]]:
    """(named dimensions and their default sizes, each input's shape and dtype) for the template."""
    infer = _Infer(region, known, values or {})
    try:
        tree = ast.parse(region.body)
    except SyntaxError:
        tree = ast.Module(body=[], type_ignores=[])
    # What runs before the selection in the function: which inputs are sizes, how dimensions tie.
    for text in region.prelude:
        try:
            before = ast.parse(text).body
        except SyntaxError:
            continue
        infer.find_ints(ast.Module(body=before, type_ignores=[]))
        for stmt in before:
            infer.statement(stmt)
    for name in list(infer.free):
        if isinstance(infer.locals.get(name), list):
            infer.assign(name, infer.locals[name])
    infer.locals.clear()
    infer.find_ints(tree)
    for stmt in tree.body:
        infer.statement(stmt)
    for name in list(infer.free):
        infer.assign(name, infer.default_shape())
    shapes = {n: ([infer.render(d) for d in infer.shapes[n]], infer.dtypes.get(n, infer.float_dtype))
              for n in region.inputs if n in infer.shapes}
    used = {w for s, _ in shapes.values() for d in s if isinstance(d, str) for w in re.findall(r"[A-Za-z_][\w.]*", d)}
    symbols = {v.name: v.size for v in infer.vars if v.name in used and v not in infer.bound}
    for name, var in infer.param_vars.items():  # config fields used as sizes: after the sizes they equal
        if "." in name:
            d = infer.render(var)
            symbols[name] = d if d != name else var.size
    for name in region.inputs:  # an int input: its size (the dimension it names, or the number it equals)
        if name in infer.ints:
            d = infer.render(infer.ints[name])
            root = infer.find(infer.ints[name])
            symbols[name] = d if isinstance(d, int) else symbols.get(d, root.size if isinstance(root, _Var) else 256)
    return symbols, shapes
