"""A lowered program as plain JSON-able data: what the generated binding interprets at run time.

``{"inputs": [...], "checks": [[shape, dtype], ...], "roles": [[role, path, index], ...], "steps": [...],
"outputs": [...], "tuple": bool, "sources": {kernel: cuda or triton module}}`` (``roles``: what each input
is, a parameter or buffer by path or forward's input by position); a step is a kernel launch
``{"kernel", "grid", "block", "args", "outputs": [[name, shape, dtype, format?], ...], "layouts"?}`` (``layouts``:
the arguments it reads in channels-last, name -> torch memory format; an output's ``format``: the memory format
it is written in, where that is not contiguous), a Triton
launch ``{"triton", "grid", "args", "outputs", "meta", "tuple"}`` (the GEMM family; ``meta``
holds the tile's constexprs, ``num_warps`` and ``num_stages``; ``tuple`` names the value its
outputs form when there are several), or a PyTorch call ``{"op", "name", "args", "kwargs", "layout"?}``
(GEMMs left to cuBLAS, views, uncovered ops; ``layout``: a convolution run with its input and weight in
that torch memory format, which returns its output so; ``convert``: ``{"kernel", "grid", "block", "shape"}``,
the kernel that writes its NCHW input in that format, its output's physical (channels-last) shape).
"""

from __future__ import annotations

import ast
import subprocess
import sys
from typing import Any

from stitch_lsp.coders.template.lower import LoweredProgram, lower
from stitch_lsp.coders.template.strides import checked_views
from stitch_lsp.contract import TRACE_WORKER
from stitch_lsp.contract.trace import TraceReply, TraceRequest
from stitch_lsp.plan.gemm_tiles import GemmOptions, default_options
from stitch_lsp.op_graph import OpGraph, specialise
from stitch_lsp.serde import from_json, to_json


def program_data(program: LoweredProgram) -> dict[str, Any]:
    graph = program.graph
    index = graph.index()
    steps: list[dict[str, Any]] = []
    for step in program.steps:
        if step.kernel is not None:
            k = step.kernel
            leaves = k.params[: len(k.params) - len(k.outputs)]
            if k.backend == "triton":
                steps.append({
                    "triton": k.name, "grid": [k.grid, 1, 1], "args": leaves, "meta": dict(k.meta),
                    "outputs": [[o, list(index[o].shape), index[o].dtype] for o in k.outputs], "tuple": k.tuple_name,
                })
                continue
            steps.append({
                "kernel": k.name, "grid": k.grid, "block": k.block, "args": leaves,
                "outputs": [[o, list(index[o].shape), index[o].dtype, *([k.out_layouts[o]] if o in k.out_layouts
                                                                       else [])] if o in index
                            else [o, list(k.scratch[o][0]), k.scratch[o][1]] for o in k.outputs],
                **({"layouts": dict(k.layouts)} if k.layouts else {}),
                **({"strided": {a: list(st) for a, st in k.strided.items()}} if k.strided else {}),
                **({"shared": k.shared} if k.shared else {}),
                **({"team": k.team} if k.team else {}),
                **({"zeroed": list(k.zeroed)} if k.zeroed else {}),
                **({"least": k.least_blocks} if k.least_blocks else {}),
            })
            continue
        for n in step.nodes:
            node = index[n]
            extra = {}
            if step.layout and n in program.conv_layouts:
                extra["layout"] = step.layout
                if step.convert is not None:
                    c = step.convert
                    extra["convert"] = {"kernel": c.name, "grid": c.grid, "block": c.block,
                                        "shape": list(c.scratch[c.outputs[0]][0])}
            steps.append({"op": node.op, "name": n, "args": node.args, "kwargs": node.kwargs, **extra})
    steps = checked_views(_linear_calls(steps, set(graph.outputs)))
    return {
        "inputs": [i.name for i in graph.inputs],
        "checks": [[list(i.shape), i.dtype] for i in graph.inputs],
        "roles": [[i.role, i.path, i.index] for i in graph.inputs],
        "steps": steps,
        "outputs": [program.returned_as.get(o, o) for o in graph.outputs],
        "tuple": graph.output_is_tuple,
        "sources": {k.name: k.source for k in program.kernels},
    }


def _refs(v: Any, found: list[str]) -> list[str]:
    if isinstance(v, dict):
        if "$" in v:
            found.append(v["$"])
        for x in v.values():
            _refs(x, found)
    elif isinstance(v, list):
        for x in v:
            _refs(x, found)
    return found


def _linear_calls(steps: list[dict[str, Any]], outputs: set[str]) -> list[dict[str, Any]]:
    """A linear layer left to cuBLAS, traced as ``permute(w, [1, 0])`` then ``addmm(b, x, that)`` (or ``mm``),
    called as one ``linear(x, w, b)``: for a 2-D ``x`` it runs that very addmm (or mm), with one Python call
    fewer before the first launch of the program, where the GPU waits."""
    uses: dict[str, int] = {}
    for step in steps:
        # A kernel launch names its arguments plainly; a PyTorch call refers to them as {"$": name}.
        names = list(step["args"]) if "kernel" in step or "triton" in step else _refs([step.get("args"),
                                                                                      step.get("kwargs")], [])
        for name in names:
            uses[name] = uses.get(name, 0) + 1
    permutes = {s["name"]: s for s in steps if s.get("op") == "aten.permute.default" and s["args"][1] == [1, 0]
                and not s.get("layout")}
    dropped: set[str] = set()
    out: list[dict[str, Any]] = []
    for step in steps:
        op, args = step.get("op"), step.get("args")
        fused = None
        if op == "aten.addmm.default" and not step["kwargs"] and len(args) == 3:
            bias, x, wt = args
            fused = (x, wt, bias)
        elif op == "aten.mm.default" and not step["kwargs"] and len(args) == 2:
            (x, wt), bias = args, None
            fused = (x, wt, bias)
        if fused is not None:
            x, wt, bias = fused
            name = wt.get("$") if isinstance(wt, dict) else None
            perm = permutes.get(name)
            if perm is not None and uses.get(name) == 1 and name not in outputs and isinstance(x, dict):
                dropped.add(name)
                out.append({"op": "aten.linear.default", "name": step["name"],
                            "args": [x, perm["args"][0]] + ([bias] if bias is not None else []), "kwargs": {}})
                continue
        out.append(step)
    return [s for s in out if s.get("name") not in dropped or s.get("op") != "aten.permute.default"]


def program_for(graph_json: str, shapes: list[tuple[int, ...]], gemm_mode: str | None = None,
                sm: int = 90, conv_layout: str = "", attention: bool | str = True) -> dict[str, Any]:
    """Re-lower a symbolically traced graph for other input shapes (the binding's just-in-time path), for a
    device of compute capability ``sm``.

    ``gemm_mode``: the GEMM choice the module was generated with (None, from modules generated before it
    was recorded: the default); ``attention``: whether attention was taken as one fused call.
    """
    graph = from_json(graph_json, OpGraph)
    if not graph.symbolic:
        raise ValueError("this kernel was traced for fixed shapes only; fuse again for the new shapes")
    return program_data(lower(specialise(graph, shapes), _options(gemm_mode), sm=sm,
                              channels_last=False if conv_layout == "nchw" else None, attention=attention))


def program_for_init(reference_source: str, args: tuple, kwargs: dict, inputs: list[tuple[list[int], str]],
                     roles: list[list[Any]], gemm_mode: str | None = None, sm: int = 90,
                     conv_layout: str = "", attention: bool | str = True,
                     symbolic: bool = True) -> tuple[dict[str, Any], str]:
    """The reference traced again for a model built with other constructor arguments (which can change
    the graph's constants), at forward's ``inputs`` (shape, dtype); the program and the traced graph
    (``"{}"`` where the sizes were fixed: ``symbolic=False``, several times faster on a deep net, for a program
    that serves these shapes only).

    ``roles``: the inputs the fused call passes (``program_data``'s ``roles``); a model whose parameters
    and buffers differ from those with these arguments cannot be called that way, and is refused.
    """
    reply = _trace_in_child(TraceRequest(task_source=reference_source, init=_literal(tuple(args), dict(kwargs)),
                                         inputs=[(list(shape), dtype) for shape, dtype in inputs],
                                         symbolic=symbolic))
    if not reply.ok or reply.graph is None:
        raise ValueError(f"this fused kernel could not be generated again for these constructor arguments "
                         f"({reply.message}); fuse again")
    graph = reply.graph
    have = [[i.role, i.path, i.index] for i in graph.inputs]
    if have != [list(r) for r in roles]:
        raise ValueError("built with these constructor arguments the model has other parameters, buffers or "
                         f"inputs ({', '.join(p or f'input {i}' for _, p, i in have)}) than the fused kernel "
                         f"takes ({', '.join(p or f'input {i}' for _, p, i in roles)}); fuse again")
    data = program_data(lower(graph, _options(gemm_mode), sm=sm,
                              channels_last=False if conv_layout == "nchw" else None, attention=attention))
    return data, (to_json(graph) if graph.symbolic else "{}")


def _literal(args: tuple, kwargs: dict) -> str:
    """The constructor arguments as a Python literal for the trace request (which is plain data)."""
    text = repr((args, kwargs))
    try:
        same = ast.literal_eval(text) == (args, kwargs)
    except (ValueError, SyntaxError, TypeError):
        same = False
    if not same:
        raise ValueError("this fused kernel can be generated again only for constructor arguments that are plain "
                         f"values (numbers, strings, tuples, lists, dicts), not {text[:120]}; fuse again")
    return text


def _trace_in_child(request: TraceRequest, timeout_s: float = 300.0) -> TraceReply:
    """The worker's trace, in a child process of this interpreter (the binding runs in the user's program:
    there is no worker pool to ask)."""
    try:
        proc = subprocess.run([sys.executable, "-m", TRACE_WORKER, "--request"], input=to_json(request),
                              capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return TraceReply(ok=False, message=f"tracing took longer than {timeout_s:.0f} s")
    if proc.returncode != 0:
        tail = proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else f"exit status {proc.returncode}"
        return TraceReply(ok=False, message=f"the tracing process failed: {tail}")
    return from_json(proc.stdout, TraceReply)


def _options(gemm_mode: str | None) -> GemmOptions:
    return GemmOptions(mode=gemm_mode) if gemm_mode else default_options()
