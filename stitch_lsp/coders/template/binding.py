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

from stitch_lsp.coders.template.lower import LoweredProgram
from stitch_lsp.coders.template.program import program_data
from stitch_lsp.pipeline import Task
from stitch_lsp.serde import to_json

LOADER_IMPORT = "from stitch_lsp.runtime.loader import load_kernel, load_triton, prefetch_kernels"

_RUNTIME = '''
_KERNELS = {}


def _signature(tensors):
    # Hashable as they come (no string building): this runs on every call.
    return tuple((t.shape, t.dtype, t.device) for t in tensors)


class _Fused:
    \"\"\"One traced graph's fused program, resolved once per input signature: the baked program for the
    shapes it was generated at, the graph re-lowered (where Stitch is importable) for others.\"\"\"

    def __init__(self, baked, graph):
        self.baked = baked
        self.graph = graph
        self.programs = {}

    def __call__(self, *tensors):
        prog = self.programs.get(_signature(tensors))
        if prog is None:
            prog = self.prepare(tensors)
        return prog(tensors)

    def __deepcopy__(self, memo):
        return self  # programs and kernels are shared, never copied

    def prepare(self, tensors):
        for t in tensors:
            if not t.is_cuda:
                raise ValueError(f"the fused kernel runs on CUDA tensors, got one on {t.device}")
        prog = self.programs[_signature(tensors)] = _Prepared(self.data_for(tensors))
        return prog

    def data_for(self, tensors):
        \"\"\"The program (plain data) for these tensors' shapes and dtypes.\"\"\"
        named = [[list(t.shape), str(t.dtype).replace("torch.", "")] for t in tensors]
        baked = self.baked
        if named == baked["checks"]:
            return baked
        for (shape, dtype), (want_shape, want_dtype) in zip(named, baked["checks"]):
            if dtype != want_dtype:
                raise ValueError(f"the fused kernel takes {want_dtype} here, got {dtype}; fuse again for {dtype}")
        try:
            from stitch_lsp.coders.template.program import program_for
        except ImportError:
            raise ValueError(
                f"this fused kernel was generated for shapes {[c[0] for c in baked['checks']]}; "
                f"got {[s for s, _ in named]}. Install Stitch to re-generate it for new shapes, "
                "or fuse again") from None
        return program_for(self.graph, [s for s, _ in named], _GEMM_MODE, sm=_sm(tensors[0]),
                           conv_layout=_CONV_LAYOUT, attention=_ATTENTION)


def _sm(tensor):
    # Kernels for the device the tensors are on (Hopper's clusters from compute capability 9.0); an H100, as
    # the Planner assumes, for tensors on no GPU (the program is only described then, never run).
    if not tensor.is_cuda:
        return 90
    major, minor = torch.cuda.get_device_capability(tensor.device)
    return 10 * major + minor


# ATen overloads called through torch's generated Python bindings, which parse their arguments in C++:
# torch.ops' generic path costs a few microseconds more a call, and each call before the first launch is
# time the GPU sits idle. Each one runs the same overload with the same arguments.
_DIRECT = {
    "aten.addmm.default": torch.addmm, "aten.mm.default": torch.mm, "aten.bmm.default": torch.bmm,
    "aten.baddbmm.default": torch.baddbmm, "aten.permute.default": torch.permute, "aten.t.default": torch.t,
    "aten.transpose.int": torch.transpose, "aten.view.default": torch.Tensor.view, "aten.cat.default": torch.cat,
    "aten.reshape.default": torch.reshape,
    "aten.unsqueeze.default": torch.unsqueeze, "aten.convolution.default": torch.convolution,
    "aten.linear.default": torch.nn.functional.linear,
}


def _aten(op):
    fn = _DIRECT.get(op)
    if fn is None:
        fn = torch.ops
        for part in op.split("."):
            fn = getattr(fn, part)
    return fn


def _reads(v):
    # Whether an argument spec names a value of the program or the device (else it is the same every call).
    if isinstance(v, dict):
        return "$" in v or "$device" in v or any(_reads(x) for x in v.values())
    if isinstance(v, list):
        return any(_reads(x) for x in v)
    return False


def _resolver(spec):
    """``spec`` (a call's arguments) as a function of the environment, worked out once: a constant spec is
    built once, a list whose references are all top-level fills its slots, anything else walks the spec."""
    if not _reads(spec):
        fixed = _value(spec, {}, None)
        return lambda env, device: fixed
    if isinstance(spec, list) and all(not _reads(v) or (isinstance(v, dict) and set(v) == {"$"}) for v in spec):
        template = _value([None if _reads(v) else v for v in spec], {}, None)
        slots = [(i, v["$"]) for i, v in enumerate(spec) if _reads(v)]

        def fill(env, device):
            args = template.copy()
            for i, name in slots:
                args[i] = env[name]
            return args

        return fill
    return lambda env, device: _value(spec, env, device)


def _value(v, env, device):
    if isinstance(v, dict):
        if "$" in v:
            return env[v["$"]]
        if "$dtype" in v:
            return getattr(torch, v["$dtype"])
        if "$memory_format" in v:
            return getattr(torch, v["$memory_format"])
        if "$device" in v:
            return device
        return {k: _value(x, env, device) for k, x in v.items()}
    if isinstance(v, list):
        return [_value(x, env, device) for x in v]
    return v


def _ready(t, layout=None):
    # Kernels index their inputs as contiguous (or in the memory format named) and load 16 bytes at a time.
    if type(layout) is tuple:  # read in place at these strides: a copy laid out so when they differ
        if t.stride() != layout or t.data_ptr() % 16:
            t = torch.empty_strided(t.shape, layout, dtype=t.dtype, device=t.device).copy_(t)
        return t
    t = t.contiguous() if layout is None else t.contiguous(memory_format=layout)
    if t.data_ptr() % 16:
        t = t.clone()
    return t


def _in_layout(x, convert):
    # The convolution's NCHW input written in channels-last by the program's own tiled transpose (torch's
    # copy of a permuted tensor runs well short of the bandwidth): the same values, the same strides.
    name, source, grid, block, shape, kernel = convert
    rank = len(shape)
    out = torch.empty(shape, dtype=x.dtype, device=x.device).permute(0, rank - 1, *range(1, rank - 1))
    if kernel is not None:
        kernel.launch_pointers(grid, block, [x.data_ptr(), out.data_ptr()])
        return out
    kernel = _KERNELS.get(source)
    if kernel is None:
        kernel = _KERNELS[source] = load_kernel(source, name)
    kernel(grid, block, [x, out])
    convert[5] = kernel
    return out


def _version(t):
    try:
        return t._version
    except RuntimeError:  # an inference tensor keeps no version counter: never taken from the cache
        return None


def _team_grid(kernel, most, block, team, shared, least=0):
    # A team kernel loops over its rows, and a team's blocks wait for one another: as many whole teams as this GPU
    # holds at once, up to ``most`` blocks (and at least ``least``).
    fit = kernel.resident_blocks(block, shared)
    if fit < max(team, least):
        raise RuntimeError(f"{kernel.name} needs {max(team, least)} blocks of {block} threads resident at once and "
                           f"this GPU holds {fit}: fuse again on this GPU")
    return min(most, fit // team * team)


def _weight_in(w, layout, cache):
    # A convolution's weight in ``layout``, converted once per weight value: an in-place change (the
    # Verifier's copy of the reference's weights, an optimiser step) bumps its version, a new tensor is
    # another object; ``cache`` holds [the weight, its storage and version, the converted weight].
    key = (w.data_ptr(), _version(w), w.shape, w.dtype)
    held = cache[0]() if cache[0] is not None else None
    if held is w and cache[1] == key and key[1] is not None:
        return cache[2]
    with torch.no_grad():
        converted = w.contiguous(memory_format=layout)
    cache[:] = [weakref.ref(w), key, converted]
    return converted


class _Prepared:
    \"\"\"A program resolved once per input signature: ops looked up, output specs built, kernels loaded.

    Each kernel's first launch goes through the loader's checked call (devices, dtypes, argument
    count); the signature fixes all three, so later launches pass bare pointers.
    \"\"\"

    def __init__(self, data):
        self.inputs = data["inputs"]
        self.outputs = data["outputs"]
        self.tuple = data["tuple"]
        self.steps = []
        for step in data["steps"]:
            if "triton" in step:
                outs = [(o, tuple(shape), getattr(torch, dtype)) for o, shape, dtype in step["outputs"]]
                meta = dict(step["meta"])
                self.steps.append(["triton", step["triton"], data["sources"][step["triton"]], step["args"], outs,
                                   tuple(step["grid"]), meta, None, step.get("tuple") or ""])
                continue
            name = step.get("kernel")
            if name is None:
                op = step["op"]
                if op == "getitem":
                    self.steps.append(["getitem", step["name"], step["args"][0]["$"], step["args"][1]])
                    continue
                fn = _aten(op)
                if step.get("layout"):
                    # A convolution run in channels-last: its input and weight in that format, so cuDNN
                    # takes its NHWC kernels and returns the output in it.
                    convert = step.get("convert")
                    if convert is not None:  # [kernel name, source, grid, block, output shape, the loaded kernel]
                        convert = [convert["kernel"], data["sources"][convert["kernel"]], (convert["grid"], 1, 1),
                                   (convert["block"], 1, 1), tuple(convert["shape"]), None]
                    self.steps.append(["layout", step["name"], fn, _resolver(step["args"]), _resolver(step["kwargs"]),
                                       getattr(torch, step["layout"]), [None, None, None], convert])
                    continue
                self.steps.append(["op", step["name"], fn, _resolver(step["args"]), _resolver(step["kwargs"])])
                continue
            outs = [(o[0], tuple(o[1]), getattr(torch, o[2]),
                     getattr(torch, o[3]) if len(o) > 3 else torch.contiguous_format) for o in step["outputs"]]
            layouts = step.get("layouts") or {}
            strided = step.get("strided") or {}
            self.steps.append(["kernel", name, data["sources"][name], step["args"], outs,
                               (step["grid"], 1, 1), (step["block"], 1, 1), None,
                               [getattr(torch, layouts[a]) if a in layouts else tuple(strided[a]) if a in strided
                                else None for a in step["args"]],
                               step.get("shared", 0), step.get("team", 0), frozenset(step.get("zeroed", ())), step.get("least", 0)])
        # Every CUDA kernel compiled at once on several threads, not one by one as the first call reaches it.
        prefetch_kernels([(s[2], s[1]) for s in self.steps if s[0] == "kernel" and s[2] not in _KERNELS]
                         + [(s[7][1], s[7][0]) for s in self.steps if s[0] == "layout" and s[7] is not None
                            and s[7][1] not in _KERNELS])

    def __call__(self, tensors):
        device = tensors[0].device
        env = dict(zip(self.inputs, tensors))
        for step in self.steps:
            kind = step[0]
            if kind == "kernel":
                _, name, source, arg_names, outs, grid, block, kernel, layouts, shared, team, zeroed, least = step
                args = [_ready(env[a], f) for a, f in zip(arg_names, layouts)]
                for out, shape, dtype, fmt in outs:
                    t = env[out] = torch.empty(shape, dtype=dtype, device=device, memory_format=fmt)
                    if out in zeroed:
                        t.zero_()
                    args.append(t)
                if kernel is not None:
                    if team:
                        kernel.launch_pointers(grid, block, [t.data_ptr() for t in args], shared, cooperative=True)
                    elif shared:  # dynamic shared memory: only the kernels that hold rows there take it
                        kernel.launch_pointers(grid, block, [t.data_ptr() for t in args], shared)
                    else:
                        kernel.launch_pointers(grid, block, [t.data_ptr() for t in args])
                    continue
                kernel = _KERNELS.get(source)
                if kernel is None:
                    kernel = _KERNELS[source] = load_kernel(source, name)
                if team:
                    grid = step[5] = (_team_grid(kernel, grid[0], block[0], team, shared, least), 1, 1)
                    kernel(grid, block, args, shared_mem=shared, cooperative=True)
                elif shared:
                    kernel(grid, block, args, shared_mem=shared)
                else:
                    kernel(grid, block, args)
                step[7] = kernel
            elif kind == "triton":
                _, name, source, arg_names, outs, grid, meta, kernel, tuple_name = step
                args = [_ready(env[a]) for a in arg_names]
                for out, shape, dtype in outs:
                    t = env[out] = torch.empty(shape, dtype=dtype, device=device)
                    args.append(t)
                if kernel is None:
                    kernel = step[7] = _KERNELS.get(source) or _KERNELS.setdefault(source, load_triton(source, name))
                kernel.launch(grid, args, meta)
                if tuple_name:
                    env[tuple_name] = tuple(env[o] for o, _, _ in outs)
            elif kind == "op":
                env[step[1]] = step[2](*step[3](env, device), **step[4](env, device))
            elif kind == "layout":
                _, name, fn, arg_spec, kw_spec, layout, cache, convert = step
                args = list(arg_spec(env, device))
                x = args[0]
                if convert is not None and x.is_contiguous() and not x.is_contiguous(memory_format=layout):
                    # Converted once a call where several convolutions read it (an Inception module's branches).
                    key = (layout, x.data_ptr(), x.shape)
                    held = env.get(key)
                    x = env[key] = held if held is not None else _in_layout(x, convert)
                args[0] = x.contiguous(memory_format=layout)
                args[1] = _weight_in(args[1], layout, cache)
                env[name] = fn(*args, **kw_spec(env, device))
            else:
                env[step[1]] = env[step[2]][step[3]]
        outs = [env[o] for o in self.outputs]
        return tuple(outs) if self.tuple else outs[0]

'''


# The generated module's own imports (it runs where the model runs; this process never imports torch).
_MODULE_IMPORTS = "import weakref\n\nimport torch"


def _module_body(program: LoweredProgram, loader_import: str, func_name: str) -> str:
    data = program_data(program)
    traced = program.source_graph or program.graph
    graph_json = to_json(traced) if traced.symbolic else "{}"
    return f'''{_MODULE_IMPORTS}
{loader_import}

# The program for the shapes it was generated at (kernels, leftover PyTorch calls), and the
# symbolically traced graph it was lowered from (to re-lower for other shapes), with the GEMM
# choice it was generated with ("cublas": GEMMs left to cuBLAS).
_BAKED = json.loads({json.dumps(json.dumps(data, indent=None))})
_GRAPH = {graph_json!r}
_GEMM_MODE = {program.gemm_mode!r}
_CONV_LAYOUT = {program.conv_layout!r}
_ATTENTION = {program.attention!r}
{_RUNTIME}
_FUSED = _Fused(_BAKED, _GRAPH)


def {func_name}(*tensors):
    return _FUSED(*tensors)
'''


# A candidate's ModelNew may be built with other constructor arguments than the reference was traced
# with (the Verifier's second shape changes every size-like argument; a user may change any). Those
# can change the graph's constants (a pool's kernel size, a scale), which re-lowering for new shapes
# cannot: such a model is traced again, on the meta device, at its first call.
_CONSTRUCTOR = '''
_TRACED_INIT = []


def _traced_init():
    # The arguments the graph was traced with: the embedded reference's own get_init_inputs(),
    # evaluated once, without disturbing the caller's random state.
    if not _TRACED_INIT:
        with torch.random.fork_rng(devices=[]):
            make = getattr(_reference, "get_init_inputs", None)
            _TRACED_INIT.append(_bound(tuple(make()) if make is not None else (), {}))
    return _TRACED_INIT[0]


def _bound(args, kwargs):
    try:
        call = inspect.signature(_reference.Model).bind(*args, **kwargs)
    except (TypeError, ValueError):
        return (tuple(args), dict(kwargs))
    call.apply_defaults()
    return dict(call.arguments)


def _same(a, b):
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.shape == b.shape
                and a.dtype == b.dtype and bool(torch.equal(a.detach().cpu(), b.detach().cpu())))
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    try:
        return bool(a == b)
    except Exception:  # noqa: BLE001 - values that cannot say: treated as different (traced again)
        return False


class _Retraced(_Fused):
    \"\"\"The reference traced again with this model's constructor arguments, at its first call's shapes.\"\"\"

    def __init__(self, args, kwargs):
        super().__init__(None, None)
        self.args, self.kwargs = args, kwargs

    def __call__(self, *tensors):
        if self.baked is None:
            self.retrace(tensors, symbolic=False)
        return _Fused.__call__(self, *tensors)

    def data_for(self, tensors):
        # First with fixed sizes, for the first call's shapes (several times faster on a deep net); called at
        # another shape, once more with symbolic ones, re-lowered for every shape after.
        if self.baked is None:
            self.retrace(tensors, symbolic=False)
        elif self.graph == "{}" and [list(t.shape) for t in tensors] != [s for s, _ in self.baked["checks"]]:
            self.retrace(tensors, symbolic=True)
        return _Fused.data_for(self, tensors)

    def retrace(self, tensors, symbolic):
        try:
            from stitch_lsp.coders.template.program import program_for_init
        except ImportError:
            raise ValueError(
                f"this fused kernel was generated for Model{_describe(_traced_init())}; this model was built "
                f"with Model{_describe(_bound(self.args, self.kwargs))}, which can change its constants. "
                "Install Stitch to re-generate it for these arguments, or fuse again") from None
        roles = _BAKED["roles"]
        inputs = sorted(((index, t) for (role, _, index), t in zip(roles, tensors) if role == "input"),
                        key=lambda pair: pair[0])
        specs = [(list(t.shape), str(t.dtype).replace("torch.", "")) for _, t in inputs]
        self.baked, self.graph = program_for_init(_REFERENCE_SOURCE, self.args, self.kwargs, specs, roles,
                                                  _GEMM_MODE, sm=_sm(tensors[0]), conv_layout=_CONV_LAYOUT,
                                                  attention=_ATTENTION, symbolic=symbolic)


def _describe(bound):
    if isinstance(bound, dict):
        return "(" + ", ".join(f"{k}={v!r}" for k, v in bound.items()) + ")"
    args, kwargs = bound
    return "(" + ", ".join([repr(a) for a in args] + [f"{k}={v!r}" for k, v in kwargs.items()]) + ")"


def _fused_for(args, kwargs):
    return _FUSED if _same(_bound(args, kwargs), _traced_init()) else _Retraced(args, kwargs)
'''


def candidate_module(task: Task, program: LoweredProgram, loader_import: str = LOADER_IMPORT) -> str:
    """A KernelBench solution: ``ModelNew`` subclasses the reference ``Model`` and calls the fused program."""
    graph = program.graph
    positions = sorted([i.index for i in graph.inputs if i.role == "input"] + [s.index for s in graph.scalars])
    args = ", ".join(f"x{k}" for k in positions)
    # Numbers forward takes were traced as constants: a call with another value needs another kernel.
    checks = "".join(
        f"        if x{s.index} != {s.value!r}:\n"
        f"            raise ValueError(f\"this fused kernel was generated for input {s.index} = {s.value!r}, got "
        f"{{x{s.index}!r}}; fuse again for that value\")\n" for s in graph.scalars)
    call_args = []
    for i in graph.inputs:
        if i.role in ("param", "buffer") and all(p.isidentifier() for p in i.path.split(".")):
            call_args.append(f"self.{i.path}")  # attribute access: get_parameter parses the path every call
        elif i.role == "param":
            call_args.append(f"self.get_parameter({i.path!r})")
        elif i.role == "buffer":
            call_args.append(f"self.get_buffer({i.path!r})")
        else:
            call_args.append(f"x{i.index}")
    return f'''"""Fused by Stitch's template Coder. Kernels: {", ".join(k.name for k in program.kernels) or "none"}.

{runtime_dependencies(program)}
"""
import inspect
import json
import types

{_module_body(program, loader_import, "fused")}

# The reference, for its __init__ (the same parameters, buffers and initialisation).
_REFERENCE_SOURCE = {task.source!r}
_reference = types.ModuleType("stitch_reference")
exec(compile(_REFERENCE_SOURCE, "<reference>", "exec"), _reference.__dict__)
{_CONSTRUCTOR}

class ModelNew(_reference.Model):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # The traced program, or (other constructor arguments) the reference traced again for them.
        self._stitch_fused = _fused_for(args, kwargs)

    def forward(self, {args}):
{checks}        return self._stitch_fused({", ".join(call_args)})
'''


def runtime_dependencies(program: LoweredProgram) -> str:
    """What the generated module needs besides torch, for its header."""
    if any(k.backend == "triton" for k in program.kernels):
        return ("Runtime dependencies: torch and Triton (the GEMM kernels are Triton kernels; Triton comes with "
                "PyTorch on Linux).")
    return "Runtime dependency: torch."


def edit_module(program: LoweredProgram, *, loader_import: str, func_name: str, header: str) -> str:
    """The module written into the user's workspace: the fused function and its kernels."""
    header = f"{header}\n\n{runtime_dependencies(program)}"
    return f'''"""{header}"""
import json

{_module_body(program, loader_import, func_name)}'''
