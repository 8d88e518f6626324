"""The Python side of a fused candidate: one function that runs the lowered program.

``fused(*state, *inputs)`` takes the graph's inputs in order (parameters and
buffers first, then forward's inputs), launches the kernels and makes the
PyTorch calls that were left over (GEMMs, views, uncovered ops), and returns
forward's outputs. The candidate module wraps it in ``ModelNew`` (a subclass of
the reference ``Model``, so parameters, buffers and their initialisation are the
reference's); the edit module exposes it to the user's code.
"""

from __future__ import annotations

import json
from typing import Any

from stitch_lsp.agents.template_coder.lower import LoweredProgram
from stitch_lsp.op_graph import OpGraph
from stitch_lsp.pipeline import Task

LOADER_IMPORT = "from stitch_lsp.runtime.loader import load_kernel"


def _py(value: Any) -> str:
    if isinstance(value, dict) and "$" in value:
        return value["$"]
    if isinstance(value, dict) and "dtype" in value:
        return f"torch.{value['dtype']}"
    if isinstance(value, list):
        return "[" + ", ".join(_py(v) for v in value) + "]"
    if isinstance(value, float):
        if value != value:
            return "float('nan')"
        if value in (float("inf"), float("-inf")):
            return "float('inf')" if value > 0 else "-float('inf')"
    return repr(value)


def _torch_call(node) -> str:
    args = node.args
    if node.op == "getitem":
        return f"{node.name} = {_py(args[0])}[{_py(args[1])}]"
    rendered = [_py(a) for a in args]
    rendered += [f"{k}={_py(v)}" for k, v in node.kwargs.items() if v is not None]
    return f"{node.name} = torch.ops.{node.op}({', '.join(rendered)})"


def function_source(program: LoweredProgram, func_name: str = "fused") -> str:
    graph: OpGraph = program.graph
    index = graph.index()
    params = [i.name for i in graph.inputs]
    lines = [f"def {func_name}({', '.join(params)}):"]
    body: list[str] = []
    forward_inputs = [i for i in graph.inputs if i.role == "input"]
    for i in graph.inputs:
        body.append(f"_check({i.name}, {tuple(i.shape)!r}, torch.{i.dtype}, {i.name!r})")
    device = forward_inputs[0].name if forward_inputs else params[0]
    for step in program.steps:
        if step.kernel is None:
            for n in step.nodes:
                body.append(_torch_call(index[n]))
            continue
        k = step.kernel
        leaves = k.params[: len(k.params) - len(k.outputs)]
        outs = []
        for o in k.outputs:
            node = index[o]
            var = f"{o}"
            body.append(f"{var} = torch.empty({tuple(node.shape)!r}, dtype=torch.{node.dtype}, device={device}.device)")
            outs.append(var)
        args = [f"_ready({leaf})" for leaf in leaves] + outs
        body.append(f"_launch({k.name!r}, {k.grid}, {k.block}, ({', '.join(args)},))")
    outputs = [o or "None" for o in graph.outputs]
    if graph.output_is_tuple:
        body.append(f"return ({', '.join(outputs)}{',' if len(outputs) == 1 else ''})")
    else:
        body.append(f"return {outputs[0]}")
    lines += ["    " + b for b in body]
    return "\n".join(lines) + "\n"


def _runtime_block(program: LoweredProgram, loader_import: str) -> str:
    sources = {k.name: k.source for k in program.kernels}
    return f'''import torch
{loader_import}

# Kernel name -> CUDA source (compiled once per process by the loader, cached by content hash).
_SOURCES = {json.dumps(sources, indent=1)}
_KERNELS = {{}}


def _launch(name, grid, block, args):
    kernel = _KERNELS.get(name)
    if kernel is None:
        kernel = _KERNELS[name] = load_kernel(_SOURCES[name], name)
    kernel((grid, 1, 1), (block, 1, 1), args)


def _check(t, shape, dtype, what):
    if tuple(t.shape) != shape or t.dtype != dtype:
        raise ValueError(
            f"{{what}}: this fused kernel was generated for {{list(shape)}} {{dtype}}, got "
            f"{{list(t.shape)}} {{t.dtype}}; run Stitch fuse again for the new shapes")
    if not t.is_cuda:
        raise ValueError(f"{{what}}: the fused kernel runs on CUDA tensors, got one on {{t.device}}")


def _ready(t):
    # Kernels index inputs as contiguous and load 16 bytes at a time.
    t = t.contiguous()
    if t.data_ptr() % 16:
        raise ValueError("an input is not 16-byte aligned (a view with an offset?); pass a fresh tensor")
    return t
'''


def candidate_module(task: Task, program: LoweredProgram, loader_import: str = LOADER_IMPORT) -> str:
    """A KernelBench solution: ``ModelNew`` subclasses the reference ``Model`` and calls the fused program."""
    graph = program.graph
    state = [i for i in graph.inputs if i.role in ("param", "buffer")]
    forward_inputs = sorted((i for i in graph.inputs if i.role == "input"), key=lambda i: i.index)
    args = ", ".join(f"x{i.index}" for i in forward_inputs)
    call_args = []
    for i in graph.inputs:
        if i.role == "param":
            call_args.append(f"self.get_parameter({i.path!r})")
        elif i.role == "buffer":
            call_args.append(f"self.get_buffer({i.path!r})")
        else:
            call_args.append(f"x{i.index}")
    del state
    return f'''"""Fused by Stitch's template Coder. Kernels: {", ".join(k.name for k in program.kernels) or "none"}."""
import types

{_runtime_block(program, loader_import)}
# The reference, for its __init__ (the same parameters, buffers and initialisation).
_REFERENCE_SOURCE = {task.source!r}
_reference = types.ModuleType("stitch_reference")
exec(compile(_REFERENCE_SOURCE, "<reference>", "exec"), _reference.__dict__)


{function_source(program)}

class ModelNew(_reference.Model):
    def forward(self, {args}):
        return fused({", ".join(call_args)})
'''


def edit_module(program: LoweredProgram, *, loader_import: str, func_name: str, header: str) -> str:
    """The module written into the user's workspace: the fused function and its kernels."""
    return f'''"""{header}"""
{_runtime_block(program, loader_import)}

{function_source(program, func_name)}'''
