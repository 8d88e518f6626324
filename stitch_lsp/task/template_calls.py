"""What a call in the selection makes of its arguments' shapes, for the shape template: one rule per family
of calls (matmuls, linear layers, norms, elementwise ops, reductions, views), looked up by the called name.

A rule returns ``NOT_MINE`` when the call is not its shape (``transpose`` with dimensions it cannot read): the
next rule for that name is tried, then the default, which decides every tensor argument's shape alone.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

from stitch_lsp.task.template_dims import Free, Parts

if TYPE_CHECKING:
    from stitch_lsp.task.template_infer import Infer

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

NOT_MINE = object()


@dataclass
class Call:
    """A call as the rules read it: the called name, the receiver's value (``x`` of ``x.view(...)``; None
    for a module such as ``torch`` or ``F``), every argument's value (the receiver's first) and the keywords."""

    node: ast.Call
    name: str
    receiver: Any
    args: list
    kwargs: dict[str, ast.expr]


def infer_call(infer: Infer, node: ast.Call):
    """The value of ``node``: a shape, ``Parts``, a scalar or None (not a tensor anyone can size)."""
    func = node.func
    kwargs = {k.arg: k.value for k in node.keywords if k.arg}
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == "self":
        return infer.module(func.attr, [infer.value(a) for a in node.args])
    name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
    receiver = None
    if isinstance(func, ast.Attribute):
        receiver = infer.value(func.value)  # None for modules (torch, F): their names are not tensors
    args = ([receiver] if receiver is not None else []) + [infer.value(a) for a in node.args]
    call = Call(node, name, receiver, args, kwargs)
    for rule in _RULES.get(name, ()):
        out = rule(infer, call)
        if out is not NOT_MINE:
            return out
    for a in args:
        infer.force(a)
    for v in kwargs.values():
        infer.force(infer.value(v))
    return None


def _bmm(infer: Infer, c: Call):
    if len(c.args) < 2:
        return NOT_MINE
    left, right = c.args[0], c.args[1]
    if isinstance(left, Free):
        batch = right[:1] if isinstance(right, list) and len(right) == 3 else [infer.symbol("H", 16)]
        k = right[1] if isinstance(right, list) and len(right) == 3 else infer.default_shape()[1]
        left = infer.tensor(left, batch + [infer.default_shape()[0], k])
    if isinstance(right, Free) and isinstance(left, list) and len(left) == 3:
        right = infer.tensor(right, [left[0], left[2], infer.symbol("N", 1024)])
    return infer.matmul(left, right)


def _matmul(infer: Infer, c: Call):
    return infer.matmul(c.args[0], c.args[1]) if len(c.args) >= 2 else NOT_MINE


def _linear(infer: Infer, c: Call):
    if len(c.args) < 2:
        return NOT_MINE
    x = infer.force(c.args[0])
    width = x[-1] if isinstance(x, list) and x else infer.default_shape()[1]
    w = infer.tensor(c.args[1], [infer.symbol("N", 1024), width])
    bias = c.args[2] if len(c.args) > 2 else infer.value(c.kwargs.get("bias"))
    if isinstance(w, list) and len(w) == 2:
        infer.tensor(bias, [w[0]])
        return x[:-1] + [w[0]] if isinstance(x, list) else None
    return None


def _norm(infer: Infer, c: Call):
    if not c.args:
        return NOT_MINE
    x = infer.force(c.args[0])
    for a in c.args[1:] + [infer.value(c.kwargs.get(k)) for k in ("weight", "bias")]:
        if isinstance(x, list) and x:
            infer.tensor(a, x[-1:] if c.name != "group_norm" else x[1:2])
    return x


def _loss(infer: Infer, c: Call):
    if len(c.args) < 2:
        return NOT_MINE
    logits = infer.force(c.args[0])
    if isinstance(logits, list) and logits:
        infer.tensor(c.args[1], logits[:-1] if len(logits) == 2 else logits[:1] + logits[2:], "int64")
    return []


def _where(infer: Infer, c: Call):
    if len(c.args) != 3:
        return NOT_MINE
    out = infer.elementwise(c.args[1], c.args[2])
    infer.tensor(c.args[0], out, "bool") if isinstance(out, list) else infer.force(c.args[0])
    return out


def _elementwise(infer: Infer, c: Call):
    if len(c.args) < 2:
        return NOT_MINE
    out = infer.elementwise(c.args[0], c.args[1])
    for a in c.args[2:]:
        infer.like(a, out) if isinstance(out, list) else infer.force(a)
    return out


def _same_shape(infer: Infer, c: Call):
    if not c.args:
        return NOT_MINE
    x = infer.force(c.args[0])
    for a in c.args[1:]:
        infer.force(a)
    return x if isinstance(x, list) else None


def _reduce(infer: Infer, c: Call):
    if not c.args:
        return NOT_MINE
    x = infer.force(c.args[0])
    for a in c.args[1:]:
        infer.force(a)
    node = c.node
    dim = c.kwargs.get("dim", node.args[0] if c.receiver is not None and node.args else
                       node.args[1] if len(node.args) > 1 else None)
    keep = c.kwargs.get("keepdim")
    return _reduced(x, dim, isinstance(keep, ast.Constant) and keep.value is True)


def _view(infer: Infer, c: Call):
    node = c.node
    if not ((c.name == "view" or c.receiver is not None) and node.args):  # torch.reshape(x, ...): x comes first
        return NOT_MINE
    infer.force(c.receiver)
    dims = node.args[0].elts if len(node.args) == 1 and isinstance(node.args[0], (ast.Tuple, ast.List)) \
        else node.args
    return [infer.size_arg(d) for d in dims]


def _transpose_dims(infer: Infer, c: Call):
    if c.receiver is None or len(c.node.args) != 2:
        return NOT_MINE
    x = infer.force(c.receiver)
    a, b = (_const_int(d) for d in c.node.args)
    if isinstance(x, list) and a is not None and b is not None and -len(x) <= min(a, b) and max(a, b) < len(x):
        y = list(x)
        y[a], y[b] = y[b], y[a]
        return y
    return NOT_MINE


def _split(infer: Infer, c: Call):
    if c.receiver is None:
        return NOT_MINE
    x = infer.force(c.receiver)
    dim = c.kwargs.get("dim", c.node.args[1] if len(c.node.args) > 1 else None)
    d = _const_int(dim) if dim is not None else 0
    if isinstance(x, list) and d is not None and -len(x) <= d < len(x):
        y = list(x)
        y[d] = infer.symbol("D", 64)
        return Parts(y)
    return None


def _t_of_free(infer: Infer, c: Call):
    if len(c.args) == 1 and isinstance(c.args[0], Free):
        return Free(c.args[0].name, not c.args[0].transposed)
    return NOT_MINE


def _transpose_last(infer: Infer, c: Call):
    if not c.args:
        return NOT_MINE
    x = infer.force(c.args[0])
    return x[:-2] + [x[-1], x[-2]] if isinstance(x, list) and len(x) >= 2 else None


def _unsqueeze(infer: Infer, c: Call):
    if not c.args:
        return NOT_MINE
    x = infer.force(c.args[0])
    node = c.node
    dim = node.args[0] if c.receiver is not None and node.args else node.args[1] if len(node.args) > 1 else None
    if isinstance(x, list) and isinstance(dim, ast.Constant) and isinstance(dim.value, int):
        d = dim.value if dim.value >= 0 else len(x) + 1 + dim.value
        return x[:d] + [1] + x[d:]
    return None


Rule = Callable[["Infer", Call], Any]

# The families in the order they are tried: a name in two (``t``, ``transpose``) tries the first one's rule first.
_FAMILIES: list[tuple[set[str], Rule]] = [
    ({"bmm"}, _bmm),
    ({"matmul", "mm"}, _matmul),
    ({"linear"}, _linear),
    ({"layer_norm", "rms_norm", "group_norm"}, _norm),
    ({"cross_entropy", "nll_loss"}, _loss),
    ({"where"}, _where),
    (_ELEMENTWISE, _elementwise),
    (_SAME_SHAPE, _same_shape),
    (_REDUCE, _reduce),
    ({"view", "reshape"}, _view),
    ({"transpose"}, _transpose_dims),
    ({"split", "chunk"}, _split),
    ({"t"}, _t_of_free),
    ({"t", "transpose"}, _transpose_last),
    ({"unsqueeze"}, _unsqueeze),
]
_RULES: dict[str, list[Rule]] = {}
for _names, _rule in _FAMILIES:
    for _name in sorted(_names):
        _RULES.setdefault(_name, []).append(_rule)


def _const_int(node: ast.AST | None) -> int | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        inner = _const_int(node.operand)
        return -inner if inner is not None else None
    return None


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
