"""A lowered program as plain JSON-able data: what the generated binding interprets at run time.

``{"inputs": [...], "checks": [[shape, dtype], ...], "steps": [...], "outputs": [...],
"tuple": bool, "sources": {kernel: cuda or triton module}}``; a step is a kernel launch
``{"kernel", "grid", "block", "args", "outputs": [[name, shape, dtype], ...]}``, a Triton
launch ``{"triton", "grid", "args", "outputs", "meta", "tuple"}`` (the GEMM family; ``meta``
holds the tile's constexprs, ``num_warps`` and ``num_stages``; ``tuple`` names the value its
outputs form when there are several), or a PyTorch call ``{"op", "name", "args", "kwargs"}``
(GEMMs left to cuBLAS, views, uncovered ops).
"""

from __future__ import annotations

from typing import Any

from stitch_lsp.agents.template_coder.lower import LoweredProgram, lower
from stitch_lsp.op_graph import OpGraph, specialise
from stitch_lsp.serde import from_json


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
                "outputs": [[o, list(index[o].shape), index[o].dtype] if o in index
                            else [o, list(k.scratch[o][0]), k.scratch[o][1]] for o in k.outputs],
            })
            continue
        for n in step.nodes:
            node = index[n]
            steps.append({"op": node.op, "name": n, "args": node.args, "kwargs": node.kwargs})
    return {
        "inputs": [i.name for i in graph.inputs],
        "checks": [[list(i.shape), i.dtype] for i in graph.inputs],
        "steps": steps,
        "outputs": list(graph.outputs),
        "tuple": graph.output_is_tuple,
        "sources": {k.name: k.source for k in program.kernels},
    }


def program_for(graph_json: str, shapes: list[tuple[int, ...]], sm: int = 90) -> dict[str, Any]:
    """Re-lower a symbolically traced graph for other input shapes (the binding's just-in-time path), for a
    device of compute capability ``sm``."""
    graph = from_json(graph_json, OpGraph)
    if not graph.symbolic:
        raise ValueError("this kernel was traced for fixed shapes only; fuse again for the new shapes")
    return program_data(lower(specialise(graph, shapes), sm=sm))
