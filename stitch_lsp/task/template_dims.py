"""What the shape template's inference works with: dimensions (variables equated as the selection's ops
require, sizes the code fixes, size expressions of ``__init__`` arguments), and the other kinds of value a
name can hold (an input whose shape is not decided yet, a scalar, the parts of a ``split``).

``Dimensions`` is the union-find over dimensions and the naming of new ones, a mixin of
``template_infer.Infer``."""

from __future__ import annotations

import ast
import re

from stitch_lsp.task.shape_values import int_value
from stitch_lsp.analysis.region.data import Region


class Var:
    """A dimension not known yet: equated with others as the selection's ops require, then either
    bound to a size the code fixes or written as a named dimension with a default size."""

    def __init__(self, name: str, size: int, order: int) -> None:
        self.name, self.size, self.order = name, size, order


Dim = int | str | Var  # a size, a size expression of __init__ arguments (``dim*4``), or a variable
Shape = list[Dim]


class Free:
    """An input of the selection whose shape is not decided yet (``transposed``: read as ``w.T``)."""

    def __init__(self, name: str, transposed: bool = False) -> None:
        self.name = name
        self.transposed = transposed


class Scalar:
    pass


SCALAR = Scalar()


class Parts:
    """What ``split`` / ``chunk`` give: several tensors of one shape (the split dimension a new size)."""

    def __init__(self, shape: Shape) -> None:
        self.shape = shape


class Dimensions:
    """The dimensions of the template's shapes: created, named, equated and written out."""

    region: Region
    free: list[str]
    vars: list[Var]
    bound: dict[Var, Dim]
    param_vars: dict[str, Var]
    values: dict[str, int]
    taken: set[str]
    default: Shape | None
    ints: dict[str, Var]
    attr_dims: dict[str, Var]

    def symbol(self, preferred: str, size: int) -> Var:
        name, i = preferred, 2
        while name in self.taken:
            name, i = f"{preferred}{i}", i + 1
        self.taken.add(name)
        var = Var(name, size, len(self.vars))
        self.vars.append(var)
        return var

    def named(self, name: str, size: int) -> Var:
        """A dimension with the user's own name (``T`` of ``B, T, C = x.size()``): an int input too."""
        self.taken.add(name)
        var = Var(name, size, len(self.vars))
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
        while isinstance(d, Var) and d in self.bound:
            d = self.bound[d]
        return d

    def unify(self, a: Dim, b: Dim) -> None:
        """Record that two dimensions are equal (a size the code fixes wins; else the older name)."""
        a, b = self.find(a), self.find(b)
        if a is b or (not isinstance(a, Var) and a == b):
            return
        if isinstance(a, Var) and isinstance(b, Var):
            older, newer = (a, b) if a.order <= b.order else (b, a)
            self.bound[newer] = older
        elif isinstance(a, Var):
            self.bound[a] = b
        elif isinstance(b, Var):
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
        if isinstance(d, Var):
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

_UNPACK = re.compile(r"^\s*([A-Za-z_]\w*(?:\s*,\s*[A-Za-z_]\w*)+)\s*=\s*[A-Za-z_]\w*\.(?:size\(\s*\)|shape)\s*(?:#.*)?$", re.M)


def _unpacked_rank(region: Region) -> int | None:
    """The rank the file's classes the selection uses unpack their input into (``B, T, C = x.size()``)."""
    for text in region.helpers.values():
        m = _UNPACK.search(text)
        if m:
            return len(m.group(1).split(","))
    return None

