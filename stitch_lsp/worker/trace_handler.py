"""Request kind ``trace``: a Task's ``Model.forward`` as an aten-level operator graph.

Runs in the worker (imports torch). The model and its inputs are built on the
meta device, so tracing costs neither memory nor compute whatever the sizes, and
the user's code is only run here, in the worker.
"""

from __future__ import annotations

import contextlib
import json
import types
from typing import Any

from stitch_lsp.op_graph import GraphInput, OpGraph, OpNode, ScalarInput

from stitch_lsp.contract.trace import TraceReply, TraceRequest
from stitch_lsp.serde import from_dict
from stitch_lsp.worker.recurrent_ops import ATEN_NAMES as RECURRENT_ATEN_NAMES


def _dtype_name(dtype: Any) -> str:
    return str(dtype).removeprefix("torch.")


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
               inputs: list[tuple[list[int], str]] | None = None, symbolic: bool = True) -> TraceReply:
    """``init``: constructor arguments (args, kwargs) instead of the task's ``get_init_inputs()``;
    ``inputs``: forward's inputs as (shape, dtype) instead of ``get_inputs()``'s (a fused module built with
    other arguments is traced again this way, at the shapes it is called with); ``symbolic``: False traces
    with fixed sizes only."""
    import torch

    # As a worker traces (autograd on, outside torch.inference_mode), whatever the caller's forward runs under.
    with torch.inference_mode(False), torch.enable_grad():
        return _trace(task_source, init, inputs, symbolic)


class _Refused(Exception):
    """The task cannot be traced; the message says why (the reply's)."""


def _trace(task_source: str, init: tuple[tuple, dict] | None,
           specs: list[tuple[list[int], str]] | None, symbolic: bool = True) -> TraceReply:
    import torch

    try:
        module = _load_task(task_source)
        model, inputs, init_args, init_kwargs = _build_task(module, init, specs)
        scalars = _scalar_inputs(model, inputs, task_source)
        tensor_positions = [i for i in range(len(inputs)) if i not in scalars]
        params = dict(model.named_parameters())
        buffers = dict(model.named_buffers())
        gm, symbolic = _graph_module(model, inputs, scalars, params, buffers, tensor_positions, task_source,
                                     symbolic)
    except _Refused as refused:
        return TraceReply(ok=False, message=str(refused))

    # Values nothing reads (the reserve buffer of a batch norm's eager path, say); copies into inputs stay.
    gm.graph.eliminate_dead_code()
    graph = OpGraph(allow_tf32=bool(torch.backends.cuda.matmul.allow_tf32), torch_version=torch.__version__,
                    symbolic=symbolic)
    _add_inputs(graph, gm, params, list(params) + list(buffers), tensor_positions)
    graph.scalars = [ScalarInput(i, v) for i, v in sorted(scalars.items())]
    from stitch_lsp.worker.model_facts.buffer_values import buffer_triangles

    triangles = buffer_triangles(lambda: module.Model(*init_args, **init_kwargs), model)
    for gi in graph.inputs:
        if gi.role == "buffer" and gi.path in triangles:
            gi.triangle = triangles[gi.path]
    _add_nodes(graph, gm, model, inputs)
    specs = [(tuple(int(d) for d in x.shape), _dtype_name(x.dtype)) for x in inputs if isinstance(x, torch.Tensor)]
    return TraceReply(ok=True, graph=graph, input_specs=specs)


def _load_task(task_source: str) -> types.ModuleType:
    """The task's source run as a module of its own, which must define the KernelBench names."""
    namespace: dict[str, Any] = {"__name__": "stitch_task"}
    module = types.ModuleType("stitch_task")
    module.__dict__.update(namespace)
    try:
        exec(compile(task_source, "<task>", "exec"), module.__dict__)
    except Exception as exc:
        raise _Refused(f"the task does not import: {type(exc).__name__}: {exc}")
    for name in ("Model", "get_inputs", "get_init_inputs"):
        if name not in module.__dict__:
            raise _Refused(f"the task has no {name}")
    return module


def _build_task(module: Any, init: tuple[tuple, dict] | None,
                specs: list[tuple[list[int], str]] | None) -> tuple[Any, list[Any], Any, Any]:
    """The model (in inference mode) and forward's inputs on the meta device, and the constructor's arguments."""
    import torch

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
        raise _Refused(f"building the task's model failed: {type(exc).__name__}: {exc}")
    return model, inputs, args, kwargs


def _scalar_inputs(model: Any, inputs: list[Any], task_source: str) -> dict[int, Any]:
    """The number inputs by position, once the model's state is known to be traceable; any input neither a
    tensor nor a number refuses the task."""
    import torch

    from stitch_lsp.worker.model_facts.module_state import state_problem

    problem = state_problem(model, task_source)
    if problem:
        raise _Refused(problem)
    scalars: dict[int, Any] = {}
    for i, x in enumerate(inputs):
        if isinstance(x, torch.Tensor):
            continue
        if isinstance(x, (bool, int, float)):
            scalars[i] = x  # traced as the constant it is; the binding checks each call passes the same
            continue
        raise _Refused(f"input {i} is a {type(x).__name__}, not a tensor or a number: "
                       "only tensor and number inputs are fused")
    return scalars


# Symbolic sizes cost sympy's simplification of every size expression: on a Swin transformer's window partitions
# that ran past ten minutes where fixed sizes trace in three seconds. Past this many seconds the fixed-size trace
# is taken (the candidate is then specialised to the task's shape, as fixed-size traces always are).
SYMBOLIC_TRACE_S = 120.0


# Past this many parameters and buffers, their sizes are traced as the numbers they are and only forward's
# inputs get symbols. Sympy's work grows with the symbols: a ResNet-101's 314 weights trace in 7 s this way
# against 15, a MobileNetV2 in 12 against 55, a Swin MLP in 3 where all-symbolic ran past two minutes. A net
# that deep is fused again, not re-lowered, when its configuration changes (the program then names the size
# that differs).
FIXED_STATE_OVER = 64


class _TooSlow(Exception):
    pass


@contextlib.contextmanager
def _deadline(seconds: float):
    """Interrupt the block after ``seconds`` (a ``SIGALRM`` timer; where there is none, or off the main thread,
    the block runs to its end)."""
    import signal
    import threading

    if not hasattr(signal, "setitimer") or threading.current_thread() is not threading.main_thread():
        yield
        return

    def expire(signum: int, frame: Any) -> None:
        raise _TooSlow(f"symbolic tracing took over {seconds:.0f} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _graph_module(model: Any, inputs: list[Any], scalars: dict[int, Any], params: dict, buffers: dict,
                  tensor_positions: list[int], task_source: str, symbolic: bool = True) -> tuple[Any, bool]:
    """forward, functionalised and traced to aten with symbolic sizes (fake ones where that fails), and
    whether the sizes are symbolic."""
    from torch.fx.experimental.proxy_tensor import make_fx
    from torch.func import functional_call, functionalize

    from stitch_lsp.worker.decompositions import decomposition_table
    from stitch_lsp.worker.model_facts.module_state import plain_trace_error, state_problem
    from stitch_lsp.worker.recurrent_ops import has_recurrent_module, recurrent_as_library_calls

    names = list(params) + list(buffers)
    n_state = len(names)

    def run(*flat):
        state = dict(zip(names, flat[:n_state]))
        given = iter(flat[n_state:])
        args = tuple(scalars[i] if i in scalars else next(given) for i in range(len(inputs)))
        return functional_call(model, state, args)

    # Parameters as plain tensors, so their sizes are symbolic too (a model built for other sizes fits), up to
    # FIXED_STATE_OVER of them.
    flat = [p.detach() for p in params.values()] + list(buffers.values()) + [inputs[i] for i in tensor_positions]
    # Symbolic sizes where tracing allows them, else fake ones; a recurrent module as one call, else (should this
    # torch refuse the opaque op) step by step as written.
    attempts = [("symbolic", True), ("fake", True)]
    if has_recurrent_module(model):
        attempts += [("symbolic", False), ("fake", False)]
    if not symbolic:
        attempts = [a for a in attempts if a[0] != "symbolic"]
    errors: list[tuple[str, Exception]] = []
    for mode, opaque in attempts:
        try:
            args = _fixed_state(flat, n_state) if mode == "symbolic" and n_state > FIXED_STATE_OVER else flat
            with _as_on_cuda(), (recurrent_as_library_calls() if opaque else contextlib.nullcontext()), \
                    (_deadline(SYMBOLIC_TRACE_S) if mode == "symbolic" else contextlib.nullcontext()):
                gm = make_fx(functionalize(run), decomposition_table=decomposition_table(), tracing_mode=mode)(*args)
            return gm, mode == "symbolic"
        except Exception as exc:
            errors.append((mode, exc))
    # What the fake-size trace met says most (the symbolic one fails first on sizes alone).
    why = state_problem(model, task_source, reads=True) or plain_trace_error(next(e for m, e in errors if m == "fake"))
    raise _Refused(f"tracing Model.forward failed: {why}")


def _fixed_state(flat: list[Any], n_state: int) -> list[Any]:
    """``flat`` as fake tensors of one shape environment: the first ``n_state`` (parameters and buffers) with
    fixed sizes, the rest (forward's inputs) with symbolic ones; make_fx traces in the mode they carry."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import DimDynamic, ShapeEnv, StatelessSymbolicContext

    mode = FakeTensorMode(shape_env=ShapeEnv())

    def fake(x: Any, sizes: Any) -> Any:
        return mode.from_tensor(x, symbolic_context=StatelessSymbolicContext(dynamic_sizes=[sizes] * x.dim()))

    return [fake(x, DimDynamic.STATIC if i < n_state else DimDynamic.DYNAMIC) for i, x in enumerate(flat)]


def _add_inputs(graph: OpGraph, gm: Any, params: dict, names: list[str], tensor_positions: list[int]) -> None:
    """The graph's placeholders in order: parameters, buffers, then forward's tensor inputs."""
    n_state = len(names)
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
            graph.inputs.append(GraphInput(node.name, "input", "", tensor_positions[i - n_state], shape, dtype, exprs,
                                           strides=_strides_if_not_row_major(val, shape)))


def _strides_if_not_row_major(val: Any, shape: tuple[int, ...]) -> tuple[int, ...]:
    try:
        strides = tuple(_hint(s) for s in val.stride())
    except Exception:  # noqa: BLE001 - a tensor subclass without strides: read as row-major
        return ()
    want, step = [], 1
    for d in reversed(shape):
        want.append(step)
        step *= max(d, 1)
    row_major = all(d == 1 or s == w for d, s, w in zip(shape, strides, reversed(want)))
    # An expanded input (stride 0) is read row-major: a copy laid out at its strides would overlap itself.
    overlapping = any(s == 0 and d > 1 for d, s in zip(shape, strides))
    return () if row_major or overlapping or not all(isinstance(s, int) for s in strides) else strides


def _add_nodes(graph: OpGraph, gm: Any, model: Any, inputs: list[Any]) -> None:
    """One OpNode per aten call (size arithmetic left out), and the outputs."""
    import torch
    from torch.utils import _pytree as pytree

    attention: dict[str, bool] = {}
    for node in gm.graph.nodes:
        if node.op == "call_function":
            op_node = _op_node(node, attention)
            if op_node is not None:
                graph.nodes.append(op_node)
        elif node.op == "output":
            result = node.args[0]
            flat, _ = pytree.tree_flatten(result)
            graph.outputs = [n.name if isinstance(n, torch.fx.Node) else "" for n in flat]
            graph.output_is_tuple = isinstance(result, (tuple, list)) and not (
                isinstance(result, (tuple, list)) and len(result) == 1 and not _returns_sequence(model, inputs))


def _op_node(node: Any, attention: dict[str, bool]) -> OpNode | None:
    """The call as an OpNode, or None for size arithmetic (its uses carry the expression instead).
    ``attention``: the efficient-attention nodes seen so far, whose first output is the attention's."""
    import torch

    val = node.meta.get("val")
    if isinstance(val, (torch.SymInt, torch.SymFloat, torch.SymBool, int, float)):
        return None
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
    elif op in RECURRENT_ATEN_NAMES:  # traced as one opaque op: the graph names the ATen call it stands for
        op = RECURRENT_ATEN_NAMES[op]
    elif op == "getitem" and attention.get(getattr(node.args[0], "name", "")) and node.args[1] == 0:
        op, args, kwargs = "aten.alias.default", [node.args[0]], {}
    return OpNode(
        name=node.name, op=op,
        args_json=json.dumps(_encode(args)),
        kwargs_json=json.dumps({k: _encode(v) for k, v in kwargs.items()}),
        shape=shape, dtype=dtype, shape_expr=exprs,
    )


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
    return trace_task(request.task_source, init=init, inputs=inputs, symbolic=request.symbolic)


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
