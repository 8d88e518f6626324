"""The shape template's inference: what each statement and expression of the selection makes of the
inputs' shapes, read statically (``ast``, nothing run). Calls are ``template_calls``'s, by name."""

from __future__ import annotations

import ast
import re

from stitch_lsp.task.shape_values import DTYPES
from stitch_lsp.analysis.region.data import Region
from stitch_lsp.task.template_calls import infer_call
from stitch_lsp.task.template_dims import SCALAR, Dim, Dimensions, Free, Parts, Shape, Var

# Operands that are usually per-channel vectors when combined elementwise with a tensor.
_PER_CHANNEL = re.compile(r"^(b|g|bias|scale|gamma|beta|shift|alpha|weight)$|(_?(bias|scale|gamma|beta|shift))$", re.I)
_SHAPE_MODULES = {"GELU", "ReLU", "SiLU", "Sigmoid", "Tanh", "Dropout", "Identity", "Softmax", "LogSoftmax",
                  "LeakyReLU", "ELU", "Mish", "Hardswish", "Softplus", "ReLU6", "Hardtanh", "SELU", "CELU"}
_NORM_MODULES = {"LayerNorm", "RMSNorm"}


def _t(shape: Shape) -> Shape:
    return shape[:-2] + [shape[-1], shape[-2]] if len(shape) >= 2 else shape


def _broadcast(a: Shape, b: Shape) -> Shape:
    n = max(len(a), len(b))
    a, b = [1] * (n - len(a)) + a, [1] * (n - len(b)) + b
    return [y if x == 1 else x for x, y in zip(a, b)]


class Infer(Dimensions):
    """The shapes the selection's statements give its inputs and locals, in the order they run."""

    def __init__(self, region: Region, known: dict[str, tuple[tuple[int, ...], str]], values: dict[str, str]) -> None:
        self.region = region
        self.shapes: dict[str, Shape] = {n: list(s) for n, (s, _) in known.items() if n in region.inputs}
        self.dtypes: dict[str, str] = {n: d for n, (_, d) in known.items() if n in region.inputs}
        self.free = [n for n in region.inputs if n not in self.shapes]
        self.locals: dict[str, object] = {}
        self.vars: list[Var] = []  # in order of creation
        self.bound: dict[Var, Dim] = {}  # union-find: a variable -> what it equals
        self.param_vars: dict[str, Var] = {}  # __init__ arguments with no value, by name
        self.values = _int_values(values)
        self.taken = set(region.inputs) | set(region.function_params) | {p for p, _ in region.init_params}
        self.taken |= set(re.findall(r"\b[A-Za-z_]\w*\b", region.body))
        self.taken |= set(values)
        self.default: Shape | None = None
        self.ints: dict[str, Var] = {}  # names the code uses as sizes (``B, T, C = x.size()``, ``view(B, T)``)
        self.attr_dims: dict[str, Var] = {}  # ``self.n_head`` used as a size
        floats = [d for d in self.dtypes.values() if d.startswith(("float", "bfloat"))]
        self.float_dtype = floats[0] if floats else _parameter_dtype(region) or "float32"

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

    # -- values ----------------------------------------------------------------------------
    def assign(self, name: str, shape: Shape, dtype: str | None = None) -> Shape:
        if name in self.free:
            self.free.remove(name)
            self.shapes[name] = list(shape)
            if dtype:
                self.dtypes[name] = dtype
        return self.shapes.get(name, shape)

    def force(self, v) -> object:
        if isinstance(v, Free):
            shape = self.assign(v.name, self.default_shape())
            return _t(shape) if v.transposed else shape
        return v

    def like(self, v, other: Shape) -> object:
        """``v`` combined elementwise with a tensor of shape ``other``."""
        if isinstance(v, Free):
            if _PER_CHANNEL.search(v.name) and len(other) > 1:
                return self.tensor(v, other[-1:])
            if len(other) == 1:  # a per-channel vector (a parameter): v is the activation it scales
                return self.tensor(v, [self.default_shape()[0]] + other)
            return self.tensor(v, other)
        return v

    def tensor(self, v, shape: Shape, dtype: str | None = None, tail: int | None = None) -> object:
        """``v`` where a tensor of ``shape`` is wanted: a free input takes that shape; a known one has
        its last ``tail`` dimensions (all by default) equated with it."""
        if isinstance(v, Free):
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
                return Free(node.id)
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
            if node.attr in ("T", "mT") and isinstance(base, Free):
                return Free(base.name, not base.transposed)
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
        if isinstance(left, Free) and isinstance(right, Free):
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
        if isinstance(left, Free):
            if isinstance(right, list) and right:
                left = self.tensor(left, [self.default_shape()[0], right[-2] if len(right) >= 2 else right[0]])
            else:
                left = self.force(left)
        if isinstance(right, Free):
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
        return infer_call(self, node)

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
            self.locals[target.id] = self.force(v) if not isinstance(v, Parts) else list(v.shape)
        elif isinstance(target, (ast.Tuple, ast.List)):
            for t in target.elts:
                self.bind(t, list(v.shape) if isinstance(v, Parts) else None)


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

