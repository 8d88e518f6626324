"""The worker's ``trace`` request (a task's aten graph, traced on the meta device) and the shape recorder's
``record`` request (the shapes a user's program saw), with their replies."""

from __future__ import annotations

from attrs import define, field

from stitch_lsp.op_graph import OpGraph


@define
class TraceRequest:
    task_source: str
    # Trace on the meta device (no memory, no compute); the real tensors are never needed.
    timeout_s: float = 120.0
    # Constructor arguments instead of the task's get_init_inputs(): ``repr((args, kwargs))`` of plain values
    # (a Python literal, so tuples stay tuples); "" for the task's own.
    init: str = ""
    # Forward's tensor inputs as [shape, dtype] instead of get_inputs()'s; None for the task's own.
    inputs: list[tuple[list[int], str]] | None = None
    # Sizes as symbols (one graph for every shape), else fixed at these shapes: several times faster on deep
    # nets, for a trace whose program serves one call's shapes.
    symbolic: bool = True


@define
class TraceReply:
    ok: bool
    graph: OpGraph | None = None
    message: str = ""  # why tracing failed, in the user's terms
    input_specs: list[tuple[tuple[int, ...], str]] = field(factory=list)


@define
class RecordRequest:
    path: str
    source: str
    class_name: str | None
    function: str
    line: int  # 0-based line of the selection's first statement
    names: list[str] = field(factory=list)


@define
class RecordReply:
    ok: bool
    shapes: dict[str, tuple[list[int], str]] = field(factory=dict)  # name -> (shape, dtype)
    values: dict[str, str] = field(factory=dict)  # plain numbers among the names
    message: str = ""
