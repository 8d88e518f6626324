"""Request kind ``trace``: a Task's ``Model.forward`` as an aten-level operator graph.

Runs in the worker (imports torch). The model and its inputs are built on the
meta device, so tracing costs neither memory nor compute whatever the sizes, and
the user's code is only run here, in the worker.
"""

from __future__ import annotations

import contextlib
import json
import math
import types
from typing import Any

from stitch_lsp.op_graph import GraphInput, OpGraph, OpNode, ScalarInput

from stitch_lsp.contract.trace import TraceReply, TraceRequest
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

    def batch_norm(x, weight, bias, running_mean, running_var, training, momentum, eps):
        # Statistics over every dimension but the channels (1), the normalised output, and (training with
        # running statistics) their update in place, which functionalisation turns into copies at the end.
        dims = [0] + list(range(2, x.dim()))
        shape = [1, x.shape[1]] + [1] * (x.dim() - 2)
        xf = acc(x)
        if training or running_mean is None:
            mean = torch.mean(xf, dims, keepdim=True)
            centered = xf - mean
            var = torch.mean(centered * centered, dims, keepdim=True)
            rstd = torch.rsqrt(var + eps)
            if training and running_mean is not None:
                n = xf.numel() // xf.shape[1]
                running_mean.copy_(running_mean * (1 - momentum) + mean.reshape(-1) * momentum)
                running_var.copy_(running_var * (1 - momentum) + var.reshape(-1) * (momentum * n / max(n - 1, 1)))
        else:
            mean = running_mean.reshape(shape)
            centered = xf - mean
            rstd = torch.rsqrt(running_var.reshape(shape) + eps)
        out = centered * rstd
        if weight is not None:
            out = out * weight.reshape(shape)
        if bias is not None:
            out = out + bias.reshape(shape)
        return out.to(x.dtype), mean.reshape(-1), rstd.reshape(-1)

    def batch_norm_legit(x, weight, bias, running_mean, running_var, training, momentum, eps):
        return batch_norm(x, weight, bias, running_mean, running_var, training, momentum, eps)

    def batch_norm_no_stats(x, weight, bias, training, momentum, eps):
        return batch_norm(x, weight, bias, None, None, True, momentum, eps)

    def vector_norm(x, ord=2, dim=None, keepdim=False, *, dtype=None):
        xf = x.to(dtype) if dtype is not None else x
        dims = list(range(xf.dim())) if dim is None else ([dim] if isinstance(dim, int) else list(dim))
        if ord == 2:
            return torch.sqrt(torch.sum(xf * xf, dims, keepdim=keepdim))
        if ord == 1:
            return torch.sum(torch.abs(xf), dims, keepdim=keepdim)
        if ord == float("inf"):
            return torch.amax(torch.abs(xf), dims, keepdim=keepdim)
        if ord == float("-inf"):
            return torch.amin(torch.abs(xf), dims, keepdim=keepdim)
        if ord == 0:
            return torch.sum((xf != 0).to(xf.dtype), dims, keepdim=keepdim)
        return torch.pow(torch.sum(torch.pow(torch.abs(xf), ord), dims, keepdim=keepdim), 1.0 / ord)

    def extreme_dim(value, position):
        # max / min over a dim as the value and its first position: two reductions the Coder fuses in one pass.
        return lambda x, dim, keepdim=False: (value(x, [dim], keepdim), position(x, dim, keepdim))

    table[aten._native_batch_norm_legit.default] = batch_norm_legit
    table[aten._native_batch_norm_legit.no_stats] = batch_norm_no_stats
    table[aten.native_batch_norm.default] = batch_norm
    table[aten.linalg_vector_norm.default] = vector_norm
    table[aten.max.dim] = extreme_dim(torch.amax, torch.argmax)
    table[aten.min.dim] = extreme_dim(torch.amin, torch.argmin)
    # Kept whole: PyTorch's own kernel draws the random numbers, so the candidate's match eager's.
    for kept in (aten.native_dropout.default, aten.dropout.default):
        table.pop(kept, None)
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
        if isinstance(val, torch.SymFloat):  # a scale from the sizes, 1 / sqrt(head_dim) say
            return {"symf": str(val.node.expr), "hint": float(val.node.hint if val.node.hint is not None
                                                              else val.node.shape_env.size_hint(val.node.expr))}
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
    if isinstance(value, torch.memory_format):
        # Kept: ``.contiguous()`` is traced as a clone in ``contiguous_format``, and a clone that preserved a
        # permuted input's strides instead would make the next ``view`` fail.
        return {"$memory_format": str(value).removeprefix("torch.")}
    if isinstance(value, torch.layout):
        return None
    if isinstance(value, (bool, int, float, str)) or value is None:
        return value
    return {"unsupported": type(value).__name__}


_EFFICIENT_ATTENTION = "aten._scaled_dot_product_efficient_attention.default"
_SDPA = "aten.scaled_dot_product_attention.default"


@contextlib.contextmanager
def _as_on_cuda():
    """Forward traced as it runs on a GPU, though the model sits on the meta device.

    ``torch.tensor(0.5, device=x.device)`` becomes ``full([], 0.5)``: on the meta device a tensor made
    from a number would lose its value; a ``full`` keeps it in the graph as a constant the kernels
    inline. Dropout in training is ``native_dropout``, the fused kernel eager PyTorch runs on CUDA
    (on other devices it decomposes into ``bernoulli``, which draws other random numbers).
    """
    import torch
    import torch.nn.functional as F

    original = torch.tensor
    original_dropout = F.dropout

    def dropout(input, p=0.5, training=True, inplace=False):
        if training and 0.0 < p < 1.0 and input.numel():
            return torch.ops.aten.native_dropout.default(input, p, True)[0]
        return original_dropout(input, p, training, inplace)

    original_sdpa = F.scaled_dot_product_attention

    def sdpa(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
        # Recorded as one node (the efficient kernel has a meta implementation); the graph names it
        # scaled_dot_product_attention again, so the candidate gets the backend eager picks on its GPU.
        if enable_gqa or query.dim() != 4 or (attn_mask is not None and attn_mask.dtype == torch.bool):
            return original_sdpa(query, key, value, attn_mask, dropout_p, is_causal, scale=scale, enable_gqa=enable_gqa)
        return torch.ops.aten._scaled_dot_product_efficient_attention.default(
            query, key, value, attn_mask, False, dropout_p, is_causal, scale=scale)[0]

    def tensor(data, *args, dtype=None, device=None, requires_grad=False, pin_memory=False):
        if not args and isinstance(data, (bool, int, float)):
            if dtype is None:
                dtype = torch.bool if isinstance(data, bool) else torch.int64 if isinstance(data, int) \
                    else torch.get_default_dtype()
            return torch.full((), data, dtype=dtype, device=device)
        return original(data, *args, dtype=dtype, device=device, requires_grad=requires_grad, pin_memory=pin_memory)

    torch.tensor = tensor
    F.dropout = dropout
    F.scaled_dot_product_attention = sdpa
    try:
        yield
    finally:
        torch.tensor = original
        F.dropout = original_dropout
        F.scaled_dot_product_attention = original_sdpa


def _build_model(module: Any, args: Any, kwargs: dict) -> Any:
    """``Model(*args, **kwargs)`` on the meta device (inside the caller's ``torch.device("meta")``); a constructor
    that needs values (``[x.item() for x in torch.linspace(0, rate, depth)]``, as Swin's drop-path rates are
    made) is built on the CPU instead, with the caller's random state untouched, and moved to the meta device."""
    import torch

    try:
        return module.Model(*args, **kwargs)
    except Exception as exc:  # noqa: BLE001 - only a meta-device failure is retried; the rest is re-raised
        if "meta" not in str(exc):
            raise
    with torch.random.fork_rng(devices=[]), torch.device("cpu"):
        model = module.Model(*args, **kwargs)
    return model.to("meta")


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
            model = _build_model(module, args, kwargs).eval()
            inputs = list(module.get_inputs())
            if specs is not None:
                # The tensors at the given shapes; numbers forward takes stay the task's (traced as constants).
                shaped = iter([torch.empty(shape, dtype=getattr(torch, dtype)) for shape, dtype in specs])
                inputs = [x if isinstance(x, (bool, int, float)) else next(shaped, x) for x in inputs]
    except Exception as exc:
        return TraceReply(ok=False, message=f"building the task's model failed: {type(exc).__name__}: {exc}")
    from stitch_lsp.worker.model_facts.module_state import plain_trace_error, state_problem

    problem = state_problem(model, task_source)
    if problem:
        return TraceReply(ok=False, message=problem)
    scalars: dict[int, Any] = {}
    for i, x in enumerate(inputs):
        if isinstance(x, torch.Tensor):
            continue
        if isinstance(x, (bool, int, float)):
            scalars[i] = x  # traced as the constant it is; the binding checks each call passes the same
            continue
        return TraceReply(ok=False, message=f"input {i} is a {type(x).__name__}, not a tensor or a number: "
                                            "only tensor and number inputs are fused")
    tensor_positions = [i for i in range(len(inputs)) if i not in scalars]
    params = dict(model.named_parameters())
    buffers = dict(model.named_buffers())
    names = list(params) + list(buffers)
    n_state = len(names)

    def run(*flat):
        state = dict(zip(names, flat[:n_state]))
        given = iter(flat[n_state:])
        args = tuple(scalars[i] if i in scalars else next(given) for i in range(len(inputs)))
        return functional_call(model, state, args)

    # Parameters as plain tensors, so their sizes are symbolic too (a model built for other sizes fits).
    flat = [p.detach() for p in params.values()] + list(buffers.values()) + [inputs[i] for i in tensor_positions]
    symbolic = True
    try:
        with _as_on_cuda():
            gm = make_fx(functionalize(run), decomposition_table=_decompositions(), tracing_mode="symbolic")(*flat)
    except Exception:
        symbolic = False
        try:
            with _as_on_cuda():
                gm = make_fx(functionalize(run), decomposition_table=_decompositions(), tracing_mode="fake")(*flat)
        except Exception as exc:
            why = state_problem(model, task_source, reads=True) or plain_trace_error(exc)
            return TraceReply(ok=False, message=f"tracing Model.forward failed: {why}")

    # Values nothing reads (the reserve buffer of a batch norm's eager path, say); copies into inputs stay.
    gm.graph.eliminate_dead_code()
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
            graph.inputs.append(GraphInput(node.name, "input", "", tensor_positions[i - n_state], shape, dtype, exprs))
    graph.scalars = [ScalarInput(i, v) for i, v in sorted(scalars.items())]
    from stitch_lsp.worker.model_facts.buffer_values import buffer_triangles

    init_args, init_kwargs = args, kwargs  # the constructor's arguments (``args`` is reused below)
    triangles = buffer_triangles(lambda: module.Model(*init_args, **init_kwargs), model)
    for gi in graph.inputs:
        if gi.role == "buffer" and gi.path in triangles:
            gi.triangle = triangles[gi.path]
    attention: dict[str, bool] = {}
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
            args, kwargs = list(node.args), dict(node.kwargs)
            if op == _EFFICIENT_ATTENTION:
                # Back to the op forward called (see _as_on_cuda); its output is the tuple's first part.
                args = args + [None, False, 0.0, False][len(args) - 3:]  # the defaults tracing left out
                op, args, kwargs = _SDPA, [args[0], args[1], args[2], args[3], args[5], args[6]], \
                    {"scale": kwargs.get("scale")}
                out = val[0]
                shape, dtype, exprs = tuple(_hint(d) for d in out.shape), _dtype_name(out.dtype), [_expr(d) for d in out.shape]
                attention[node.name] = True
            elif op == "getitem" and attention.get(getattr(node.args[0], "name", "")) and node.args[1] == 0:
                op, args, kwargs = "aten.alias.default", [node.args[0]], {}
            graph.nodes.append(OpNode(
                name=node.name, op=op,
                args_json=json.dumps(_encode(args)),
                kwargs_json=json.dumps({k: _encode(v) for k, v in kwargs.items()}),
                shape=shape, dtype=dtype, shape_expr=exprs,
            ))
        elif node.op == "output":
            result = node.args[0]
            flat, _ = pytree.tree_flatten(result)
            graph.outputs = [n.name if isinstance(n, torch.fx.Node) else "" for n in flat]
            graph.output_is_tuple = isinstance(result, (tuple, list)) and not (
                isinstance(result, (tuple, list)) and len(result) == 1 and not _returns_sequence(model, inputs))
    specs = [(tuple(int(d) for d in x.shape), _dtype_name(x.dtype)) for x in inputs if isinstance(x, torch.Tensor)]
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
    return trace_request(request)


def trace_request(request: TraceRequest) -> TraceReply:
    import ast

    init = ast.literal_eval(request.init) if request.init else None
    inputs = [(list(shape), dtype) for shape, dtype in request.inputs] if request.inputs is not None else None
    return trace_task(request.task_source, init=init, inputs=inputs)


def main() -> int:
    """``python -m stitch_lsp.worker.trace_handler < task.py``: the graph as JSON (for debugging);
    with ``--request``, stdin is a TraceRequest as JSON."""
    import sys

    from stitch_lsp.serde import from_json, to_json

    text = sys.stdin.read()
    reply = trace_request(from_json(text, TraceRequest)) if "--request" in sys.argv[1:] else trace_task(text)
    print(to_json(reply, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
