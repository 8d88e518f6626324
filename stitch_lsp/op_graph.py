"""The traced operator graph of a Task: what the Planner splits and the template Coder lowers.

Plain data (no torch). A worker traces the Task's ``Model.forward`` at the aten
level (``stitch_lsp.worker.trace_handler``) and sends this back; the Planner and
the template Coder work on it in any process.

Arguments are kept as JSON text: a node reference is ``{"$": "name"}``; every
other value (ints, floats, bools, None, lists of those, dtype names as
``{"dtype": "float32"}``) is plain JSON.
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


@define
class OpNode:
    name: str
    op: str  # "aten.add.Tensor", "aten.addmm.default", ...
    args_json: str = "[]"
    kwargs_json: str = "{}"
    shape: tuple[int, ...] = ()
    dtype: str = "float32"

    @property
    def args(self) -> list[Any]:
        return json.loads(self.args_json)

    @property
    def kwargs(self) -> dict[str, Any]:
        return json.loads(self.kwargs_json)

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


@define
class TraceRequest:
    task_source: str
    # Trace on the meta device (no memory, no compute); the real tensors are never needed.
    timeout_s: float = 120.0


@define
class TraceReply:
    ok: bool
    graph: OpGraph | None = None
    message: str = ""  # why tracing failed, in the user's terms
    input_specs: list[tuple[tuple[int, ...], str]] = field(factory=list)
