"""The Python side of a fused candidate: a small interpreter of the lowered program.

``fused(*state, *inputs)`` takes the graph's inputs in order (parameters and
buffers first, then forward's inputs). For the shapes it was generated at it
runs the baked program: kernel launches (compiled once by the loader, cached by
content hash) and the PyTorch calls that were left over (GEMMs on cuBLAS, views,
uncovered ops). For other shapes it re-lowers the symbolically traced graph
(where Stitch is importable) and caches that program per shape. The candidate
module wraps it in ``ModelNew``, a subclass of the reference ``Model`` (the same
parameters, buffers and initialisation); the edit module exposes it to the
user's code.
"""

from __future__ import annotations

import json

from stitch_lsp.agents.template_coder.lower import LoweredProgram
from stitch_lsp.agents.template_coder.program import program_data
from stitch_lsp.pipeline import Task
from stitch_lsp.serde import to_json

LOADER_IMPORT = "from stitch_lsp.runtime.loader import load_kernel"

_RUNTIME = '''
_KERNELS = {}
_PROGRAMS = {}


def _signature(tensors):
    return tuple((tuple(t.shape), str(t.dtype).replace("torch.", "")) for t in tensors)


def _program_for(tensors):
    sig = _signature(tensors)
    prog = _PROGRAMS.get(sig)
    if prog is not None:
        return prog
    baked = _BAKED
    if [[list(s), d] for s, d in sig] == baked["checks"]:
        prog = baked
    else:
        for (shape, dtype), (want_shape, want_dtype) in zip(sig, baked["checks"]):
            if dtype != want_dtype:
                raise ValueError(f"the fused kernel takes {want_dtype} here, got {dtype}; fuse again for {dtype}")
        try:
            from stitch_lsp.agents.template_coder.program import program_for
        except ImportError:
            raise ValueError(
                f"this fused kernel was generated for shapes {[c[0] for c in baked['checks']]}; "
                f"got {[list(s) for s, _ in sig]}. Install Stitch to re-generate it for new shapes, "
                "or fuse again") from None
        prog = program_for(_GRAPH, [s for s, _ in sig])
    _PROGRAMS[sig] = prog
    return prog


def _value(v, env, device):
    if isinstance(v, dict):
        if "$" in v:
            return env[v["$"]]
        if "$dtype" in v:
            return getattr(torch, v["$dtype"])
        if "$device" in v:
            return device
        return {k: _value(x, env, device) for k, x in v.items()}
    if isinstance(v, list):
        return [_value(x, env, device) for x in v]
    return v


def _ready(t):
    # Kernels index their inputs as contiguous and load 16 bytes at a time.
    t = t.contiguous()
    if t.data_ptr() % 16:
        t = t.clone()
    return t


def _run(prog, tensors):
    for t in tensors:
        if not t.is_cuda:
            raise ValueError(f"the fused kernel runs on CUDA tensors, got one on {t.device}")
    device = tensors[0].device
    env = dict(zip(prog["inputs"], tensors))
    for step in prog["steps"]:
        name = step.get("kernel")
        if name is None:
            op = step["op"]
            if op == "getitem":
                env[step["name"]] = env[step["args"][0]["$"]][step["args"][1]]
                continue
            fn = torch.ops
            for part in op.split("."):
                fn = getattr(fn, part)
            env[step["name"]] = fn(*_value(step["args"], env, device), **_value(step["kwargs"], env, device))
            continue
        source = prog["sources"][name]
        kernel = _KERNELS.get(source)
        if kernel is None:
            kernel = _KERNELS[source] = load_kernel(source, name)
        args = [_ready(env[a]) for a in step["args"]]
        for out, shape, dtype in step["outputs"]:
            env[out] = torch.empty(shape, dtype=getattr(torch, dtype), device=device)
            args.append(env[out])
        kernel((step["grid"], 1, 1), (step["block"], 1, 1), args)
    outs = [env[o] for o in prog["outputs"]]
    return tuple(outs) if prog["tuple"] else outs[0]
'''


def _module_body(program: LoweredProgram, loader_import: str, func_name: str) -> str:
    data = program_data(program)
    graph_json = to_json(program.graph) if program.graph.symbolic else "{}"
    return f'''import torch
{loader_import}

# The program for the shapes it was generated at (kernels, leftover PyTorch calls), and the
# symbolically traced graph it was lowered from (to re-lower for other shapes).
_BAKED = json.loads({json.dumps(json.dumps(data, indent=None))})
_GRAPH = {graph_json!r}
{_RUNTIME}

def {func_name}(*tensors):
    return _run(_program_for(tensors), tensors)
'''


def candidate_module(task: Task, program: LoweredProgram, loader_import: str = LOADER_IMPORT) -> str:
    """A KernelBench solution: ``ModelNew`` subclasses the reference ``Model`` and calls the fused program."""
    graph = program.graph
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
    return f'''"""Fused by Stitch's template Coder. Kernels: {", ".join(k.name for k in program.kernels) or "none"}."""
import json
import types

{_module_body(program, loader_import, "fused")}

# The reference, for its __init__ (the same parameters, buffers and initialisation).
_REFERENCE_SOURCE = {task.source!r}
_reference = types.ModuleType("stitch_reference")
exec(compile(_REFERENCE_SOURCE, "<reference>", "exec"), _reference.__dict__)


class ModelNew(_reference.Model):
    def forward(self, {args}):
        return fused({", ".join(call_args)})
'''


def edit_module(program: LoweredProgram, *, loader_import: str, func_name: str, header: str) -> str:
    """The module written into the user's workspace: the fused function and its kernels."""
    return f'''"""{header}"""
import json

{_module_body(program, loader_import, func_name)}'''
