"""The traced operator graph of a Task: what the Planner splits and the template Coder lowers.

Plain data (no torch). A worker traces the Task's ``Model.forward`` at the aten
level (``stitch_lsp.worker.trace_handler``) and sends this back; the Planner and
the template Coder work on it in any process.

Arguments are kept as JSON text: a node reference is ``{"$": "name"}``; a size
that depends on the input shapes is ``{"sym": "s0*s1", "hint": 8192}``; a dtype is
``{"$dtype": "float32"}``; a memory format ``{"$memory_format": "contiguous_format"}``; a device is
``{"$device": true}`` (the inputs' device);
every other value is plain JSON.

A graph traced symbolically keeps each shape as expressions over the inputs'
sizes (``shape_expr``) next to the traced values (``shape``); ``specialise``
evaluates them for other input shapes, so a fused program can be re-lowered
for any shape without tracing again.
"""

from __future__ import annotations

import json
from typing import Any

from attrs import define, field


@define
class GraphInput:
    name: str  # placeholder name in the graph
    role: str  # "input" | "param" | "buffer"
    path: str = ""  # parameter / buffer path ("lin.weight"); "" for forward inputs
    index: int = 0  # position among forward inputs (role == "input")
    shape: tuple[int, ...] = ()
    dtype: str = "float32"
    shape_expr: list[str] = field(factory=list)
    # A buffer's values seen when it was traced: "lower" when every trailing 2-D slab is nonzero exactly on
    # and below its diagonal (a causal mask, ``torch.tril(torch.ones(n, n))``), "strict_upper" when exactly
    # above it; "" otherwise or unknown. What lets the Planner prove a masked softmax causal.
    triangle: str = ""
    # A forward input's strides as traced, where they are not row-major (a transposed view of a projection,
    # say); () when row-major or unknown. A kernel may read the input in place at these strides.
    strides: tuple[int, ...] = ()


@define
class ScalarInput:
    """A number forward takes (``get_inputs`` returns it): traced as a constant, checked on every call."""

    index: int  # position among forward's inputs
    value: bool | int | float = 0


def _concrete(v: Any) -> Any:
    if isinstance(v, dict):
        if "sym" in v or "symf" in v:
            return v["hint"]
        return {k: _concrete(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_concrete(x) for x in v]
    return v


@define
class OpNode:
    name: str
    op: str  # "aten.add.Tensor", "aten.addmm.default", ...
    args_json: str = "[]"
    kwargs_json: str = "{}"
    shape: tuple[int, ...] = ()
    dtype: str = "float32"
    shape_expr: list[str] = field(factory=list)

    @property
    def args(self) -> list[Any]:
        return _concrete(json.loads(self.args_json))

    @property
    def kwargs(self) -> dict[str, Any]:
        return _concrete(json.loads(self.kwargs_json))

    @property
    def numel(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    def refs(self) -> list[str]:
        """Names of the nodes this one reads, in argument order."""
        found: list[str] = []

        def walk(v: Any) -> None:
            if isinstance(v, dict) and "$" in v:
                found.append(v["$"])
            elif isinstance(v, (list, tuple)):
                for x in v:
                    walk(x)
            elif isinstance(v, dict):
                for x in v.values():
                    walk(x)

        walk(self.args)
        walk(self.kwargs)
        return found


@define
class OpGraph:
    inputs: list[GraphInput] = field(factory=list)
    nodes: list[OpNode] = field(factory=list)
    # Output names in forward's return order; a single tensor is a list of one.
    outputs: list[str] = field(factory=list)
    output_is_tuple: bool = False
    # Whether the reference ran with TF32 matmuls allowed (the candidate must match).
    allow_tf32: bool = False
    torch_version: str = ""
    symbolic: bool = False  # shapes carry expressions (shape_expr); see specialise()
    scalars: list[ScalarInput] = field(factory=list)  # forward's number inputs, baked into the graph

    def index(self) -> dict[str, OpNode]:
        """Every value by name; graph inputs appear as ``placeholder`` nodes."""
        index = {i.name: OpNode(name=i.name, op="placeholder", shape=tuple(i.shape), dtype=i.dtype)
                 for i in self.inputs}
        index.update((n.name, n) for n in self.nodes)
        return index

    def users(self) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {i.name: [] for i in self.inputs}
        out.update((n.name, []) for n in self.nodes)
        for n in self.nodes:
            for r in n.refs():
                out.setdefault(r, []).append(n.name)
        return out


class ShapeMismatch(ValueError):
    """Input shapes this graph cannot be specialised to (the message says which and why)."""


_SYM_FUNCS = {
    "FloorDiv": lambda a, b: a // b, "CeilDiv": lambda a, b: -(-a // b), "Mod": lambda a, b: a % b,
    "PythonMod": lambda a, b: a % b, "Max": max, "Min": min, "floor": lambda a: int(a // 1),
    "ceiling": lambda a: -int(-a // 1), "CleanDiv": lambda a, b: a // b, "IntTrueDiv": lambda a, b: a / b,
    "TruncToInt": int, "FloorToInt": lambda a: int(a // 1), "CeilToInt": lambda a: -int(-a // 1),
    "ToFloat": float, "FloatPow": lambda a, b: float(a) ** b, "FloatTrueDiv": lambda a, b: a / b,
    "OpaqueUnaryFn_sqrt": lambda a: float(a) ** 0.5,
}


def _eval_expr(expr: str, env: dict[str, int], kind=int) -> int:
    return kind(eval(expr, {"__builtins__": {}}, {**_SYM_FUNCS, **env}))  # noqa: S307 - our own printed sympy


def specialise(graph: OpGraph, shapes: list[tuple[int, ...]]) -> OpGraph:
    """The graph for inputs of ``shapes`` (one per ``graph.inputs``): every size re-evaluated."""
    if len(shapes) != len(graph.inputs):
        raise ShapeMismatch(f"expected {len(graph.inputs)} tensors, got {len(shapes)}")
    env: dict[str, int] = {}
    for gi, shape in zip(graph.inputs, shapes):
        exprs = gi.shape_expr or [str(d) for d in gi.shape]
        if len(exprs) != len(shape):
            raise ShapeMismatch(f"{gi.path or gi.name}: expected {len(exprs)} dimensions, got {len(shape)}")
        for e, d in zip(exprs, shape):
            if e.isidentifier():
                if env.setdefault(e, d) != d:
                    raise ShapeMismatch(
                        f"{gi.path or gi.name}: the kernel was generated for shapes where these sizes are equal "
                        f"({env[e]} and {d} now differ); fuse again for the new shapes")
    for gi, shape in zip(graph.inputs, shapes):
        exprs = gi.shape_expr or [str(d) for d in gi.shape]
        for e, d in zip(exprs, shape):
            if _eval_expr(e, env) != d:
                raise ShapeMismatch(f"{gi.path or gi.name}: size {d} where the traced program needs {e}")

    def sub(v: Any) -> Any:
        if isinstance(v, dict):
            if "sym" in v:
                return _eval_expr(v["sym"], env)
            if "symf" in v:
                return _eval_expr(v["symf"], env, float)
            return {k: sub(x) for k, x in v.items()}
        if isinstance(v, list):
            return [sub(x) for x in v]
        return v

    out = OpGraph(outputs=list(graph.outputs), output_is_tuple=graph.output_is_tuple,
                  allow_tf32=graph.allow_tf32, torch_version=graph.torch_version, symbolic=False,
                  scalars=list(graph.scalars))
    for gi, shape in zip(graph.inputs, shapes):
        # The traced strides hold at the traced shape only; at another the input is read row-major.
        out.inputs.append(GraphInput(gi.name, gi.role, gi.path, gi.index, tuple(shape), gi.dtype,
                                     triangle=gi.triangle, strides=gi.strides if tuple(shape) == gi.shape else ()))
    for n in graph.nodes:
        shape = tuple(_eval_expr(e, env) for e in n.shape_expr) if n.shape_expr else n.shape
        out.nodes.append(OpNode(n.name, n.op, json.dumps(sub(json.loads(n.args_json))),
                                json.dumps(sub(json.loads(n.kwargs_json))), shape, n.dtype))
    return out
