"""Request kind ``trace``: a Task's ``Model.forward`` as an aten-level operator graph.

Runs in the worker (imports torch). The model and its inputs are built on the
meta device, so tracing costs neither memory nor compute whatever the sizes, and
the user's code is only run here, in the worker.
"""

from __future__ import annotations

import json
import math
import types
from typing import Any

from stitch_lsp.op_graph import GraphInput, OpGraph, OpNode, TraceReply, TraceRequest
from stitch_lsp.serde import from_dict


def _dtype_name(dtype: Any) -> str:
    return str(dtype).removeprefix("torch.")


def _decompositions() -> dict:
    """aten's core decompositions plus ours for the normalisations and softmaxes.

    Ours spell each op as pointwise work and last-dimension reductions in float32,
    the form the template Coder fuses; aten's own versions of these are either kept
    whole by the core table or go through prims that are harder to lower.
    """
    import torch
    from torch._decomp import core_aten_decompositions

    aten = torch.ops.aten
    table = dict(core_aten_decompositions())

    def acc(x):
        return x.float() if x.dtype in (torch.float16, torch.bfloat16) else x

    def softmax(x, dim, half_to_float):
        xf = acc(x)
        e = torch.exp(xf - torch.amax(xf, dim, keepdim=True))
        out = e / torch.sum(e, dim, keepdim=True)
        return out if half_to_float else out.to(x.dtype)

    def log_softmax(x, dim, half_to_float):
        xf = acc(x)
        shifted = xf - torch.amax(xf, dim, keepdim=True)
        out = shifted - torch.log(torch.sum(torch.exp(shifted), dim, keepdim=True))
        return out if half_to_float else out.to(x.dtype)

    def layer_norm(x, normalized_shape, weight, bias, eps):
        dims = list(range(x.dim() - len(normalized_shape), x.dim()))
        xf = acc(x)
        mean = torch.mean(xf, dims, keepdim=True)
        centered = xf - mean
        rstd = torch.rsqrt(torch.mean(centered * centered, dims, keepdim=True) + eps)
        out = centered * rstd
        if weight is not None:
            out = out * weight
        if bias is not None:
            out = out + bias
        return out.to(x.dtype), mean, rstd

    def group_norm(x, weight, bias, n, c, hxw, groups, eps):
        xf = acc(x).reshape(n, groups, (c // groups) * hxw)
        mean = torch.mean(xf, [2], keepdim=True)
        centered = xf - mean
        rstd = torch.rsqrt(torch.mean(centered * centered, [2], keepdim=True) + eps)
        out = (centered * rstd).reshape(n, c, hxw)
        if weight is not None:
            out = out * weight.reshape(1, c, 1)
        if bias is not None:
            out = out + bias.reshape(1, c, 1)
        return out.reshape(x.shape).to(x.dtype), mean.reshape(n, groups), rstd.reshape(n, groups)

    def batch_norm_inference(x, weight, bias, running_mean, running_var, momentum, eps):
        # Per-channel scale and shift with the running statistics: pointwise work a GEMM epilogue can take.
        shape = [1, -1] + [1] * (x.dim() - 2)
        xf = acc(x)
        out = (xf - running_mean.reshape(shape)) * torch.rsqrt(running_var.reshape(shape) + eps)
        if weight is not None:
            out = out * weight.reshape(shape)
        if bias is not None:
            out = out + bias.reshape(shape)
        empty = x.new_empty((0,), dtype=xf.dtype)
        return out.to(x.dtype), empty, empty

    def var_mean(x, dims=None, *, correction=None, keepdim=False):
        dims = list(range(x.dim())) if dims is None else list(dims)
        mean = torch.mean(x, dims, keepdim=True)
        centered = x - mean
        count = math.prod(x.shape[d] for d in dims)
        corr = 1 if correction is None else correction
        var = torch.sum(centered * centered, dims, keepdim=keepdim) / max(count - corr, 0)
        return var, (mean if keepdim else mean.squeeze(dims))

    def var(x, dims=None, *, correction=None, keepdim=False):
        return var_mean(x, dims, correction=correction, keepdim=keepdim)[0]

    def split_with_sizes(x, sizes, dim=0):
        out, start = [], 0
        for size in sizes:
            out.append(torch.ops.aten.slice.Tensor(x, dim, start, start + size))
            start += size
        return out

    def split(x, size, dim=0):
        total = x.shape[dim]
        sizes = [min(size, total - s) for s in range(0, total, size)]
        return split_with_sizes(x, sizes, dim)

    table[aten.split_with_sizes.default] = split_with_sizes
    table[aten.split.Tensor] = split
    table[aten._softmax.default] = softmax
    table[aten._log_softmax.default] = log_softmax
    table[aten.native_layer_norm.default] = layer_norm
    table[aten.native_group_norm.default] = group_norm
    table[aten.var_mean.correction] = var_mean
    table[aten.var.correction] = var
    table[aten._native_batch_norm_legit_no_training.default] = batch_norm_inference
    return table


def _hint(d: Any) -> int:
    import torch

    if isinstance(d, torch.SymInt):
        node = d.node
        hint = getattr(node, "hint", None)
        if hint is None:
            hint = node.shape_env.size_hint(node.expr)
        return int(hint)
    return int(d)


def _expr(d: Any) -> str:
    import torch

    return str(d.node.expr) if isinstance(d, torch.SymInt) else str(int(d))


def _encode(value: Any) -> Any:
    import torch
    import torch.fx

    if isinstance(value, torch.fx.Node):
        val = value.meta.get("val")
        if isinstance(val, torch.SymInt):
            return {"sym": _expr(val), "hint": _hint(val)}
        if isinstance(val, (int, float)) and not isinstance(val, torch.Tensor):
            return val
        return {"$": value.name}
    if isinstance(value, torch.SymInt):
        return {"sym": _expr(value), "hint": _hint(value)}
    if isinstance(value, torch.device):
        return {"$device": True}
    if isinstance(value, (list, tuple)):
        return [_encode(v) for v in value]
    if isinstance(value, torch.dtype):
        return {"$dtype": _dtype_name(value)}
    if isinstance(value, (torch.layout, torch.memory_format)):
        return None
    if isinstance(value, (bool, int, float, str)) or value is None:
        return value
    return {"unsupported": type(value).__name__}


def trace_task(task_source: str, init: tuple[tuple, dict] | None = None,
               inputs: list[tuple[list[int], str]] | None = None) -> TraceReply:
    """``init``: constructor arguments (args, kwargs) instead of the task's ``get_init_inputs()``;
    ``inputs``: forward's inputs as (shape, dtype) instead of ``get_inputs()``'s (a fused module built with
    other arguments is traced again this way, at the shapes it is called with)."""
    import torch

    # As a worker traces (autograd on, outside torch.inference_mode), whatever the caller's forward runs under.
    with torch.inference_mode(False), torch.enable_grad():
        return _trace(task_source, init, inputs)


def _trace(task_source: str, init: tuple[tuple, dict] | None,
           specs: list[tuple[list[int], str]] | None) -> TraceReply:
    import torch
    from torch.fx.experimental.proxy_tensor import make_fx
    from torch.func import functional_call, functionalize
    from torch.utils import _pytree as pytree

    namespace: dict[str, Any] = {"__name__": "stitch_task"}
    module = types.ModuleType("stitch_task")
    module.__dict__.update(namespace)
    try:
        exec(compile(task_source, "<task>", "exec"), module.__dict__)
    except Exception as exc:
        return TraceReply(ok=False, message=f"the task does not import: {type(exc).__name__}: {exc}")
    for name in ("Model", "get_inputs", "get_init_inputs"):
        if name not in module.__dict__:
            return TraceReply(ok=False, message=f"the task has no {name}")
    try:
        with torch.device("meta"):
            args, kwargs = init if init is not None else (module.get_init_inputs(), {})
            # Inference mode, as the Verifier runs the reference: BatchNorm with its running statistics,
            # dropout off (a graph traced in training mode computes something else).
            model = module.Model(*args, **kwargs).eval()
            if specs is not None:
                inputs = [torch.empty(shape, dtype=getattr(torch, dtype)) for shape, dtype in specs]
            else:
                inputs = list(module.get_inputs())
    except Exception as exc:
        return TraceReply(ok=False, message=f"building the task's model failed: {type(exc).__name__}: {exc}")
    for i, x in enumerate(inputs):
        if not isinstance(x, torch.Tensor):
            return TraceReply(ok=False, message=f"input {i} is a {type(x).__name__}, not a tensor: only tensor inputs are fused")
    params = dict(model.named_parameters())
    buffers = dict(model.named_buffers())
    names = list(params) + list(buffers)
    n_state = len(names)

    def run(*flat):
        state = dict(zip(names, flat[:n_state]))
        return functional_call(model, state, tuple(flat[n_state:]))

    # Parameters as plain tensors, so their sizes are symbolic too (a model built for other sizes fits).
    flat = [p.detach() for p in params.values()] + list(buffers.values()) + inputs
    symbolic = True
    try:
        gm = make_fx(functionalize(run), decomposition_table=_decompositions(), tracing_mode="symbolic")(*flat)
    except Exception:
        symbolic = False
        try:
            gm = make_fx(functionalize(run), decomposition_table=_decompositions(), tracing_mode="fake")(*flat)
        except Exception as exc:
            return TraceReply(ok=False, message=f"tracing Model.forward failed: {type(exc).__name__}: {exc}")

    graph = OpGraph(allow_tf32=bool(torch.backends.cuda.matmul.allow_tf32), torch_version=torch.__version__,
                    symbolic=symbolic)
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    for i, node in enumerate(placeholders):
        val = node.meta.get("val")
        shape = tuple(_hint(d) for d in val.shape)
        exprs = [_expr(d) for d in val.shape]
        dtype = _dtype_name(val.dtype)
        if i < len(params):
            graph.inputs.append(GraphInput(node.name, "param", names[i], 0, shape, dtype, exprs))
        elif i < n_state:
            graph.inputs.append(GraphInput(node.name, "buffer", names[i], 0, shape, dtype, exprs))
        else:
            graph.inputs.append(GraphInput(node.name, "input", "", i - n_state, shape, dtype, exprs))
    for node in gm.graph.nodes:
        if node.op == "call_function":
            val = node.meta.get("val")
            if isinstance(val, (torch.SymInt, torch.SymFloat, torch.SymBool, int, float)):
                continue  # size arithmetic: its uses carry the expression instead
            target = node.target
            op = str(target) if isinstance(target, torch._ops.OpOverload) else getattr(target, "__name__", str(target))
            exprs: list[str] = []
            if isinstance(val, torch.Tensor):
                shape, dtype = tuple(_hint(d) for d in val.shape), _dtype_name(val.dtype)
                exprs = [_expr(d) for d in val.shape]
            else:
                shape, dtype = (), "tuple" if isinstance(val, (tuple, list)) else "scalar"
            graph.nodes.append(OpNode(
                name=node.name, op=op,
                args_json=json.dumps(_encode(list(node.args))),
                kwargs_json=json.dumps({k: _encode(v) for k, v in node.kwargs.items()}),
                shape=shape, dtype=dtype, shape_expr=exprs,
            ))
        elif node.op == "output":
            result = node.args[0]
            flat, _ = pytree.tree_flatten(result)
            graph.outputs = [n.name if isinstance(n, torch.fx.Node) else "" for n in flat]
            graph.output_is_tuple = isinstance(result, (tuple, list)) and not (
                isinstance(result, (tuple, list)) and len(result) == 1 and not _returns_sequence(model, inputs))
    specs = [(tuple(int(d) for d in x.shape), _dtype_name(x.dtype)) for x in inputs]
    return TraceReply(ok=True, graph=graph, input_specs=specs)


def _returns_sequence(model: Any, inputs: list) -> bool:
    import torch

    try:
        with torch.device("meta"):
            out = model(*inputs)
    except Exception:
        return False
    return isinstance(out, (tuple, list))


def handle(payload: Any, ctx: Any) -> TraceReply:
    request = from_dict(payload, TraceRequest)
    if ctx is not None:
        ctx.progress("planning", "tracing the task")
    return trace_task(request.task_source)


def main() -> int:
    """``python -m stitch_lsp.worker.trace_handler < task.py``: the graph as JSON (for debugging)."""
    import sys

    from stitch_lsp.serde import to_json

    print(to_json(trace_task(sys.stdin.read()), indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
