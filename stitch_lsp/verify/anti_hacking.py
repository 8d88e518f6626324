"""Static anti-hacking checks on a candidate module (Python ``ast``; no code runs).

Each flag keeps a candidate from being offered. The dynamic half (PyTorch compute
ops raising inside forward, thread and stream watching, the host-clock check)
runs in the worker: ``stitch_lsp.worker.guards``.

Codes (shared with the dynamic checks):
  HACK001 PyTorch compute in forward        HACK002 try/except fallback
  HACK003 timer / torch patching             HACK004 streams (work the timer cannot see)
  HACK005 threads / processes                HACK006 input mutation (dynamic)
  HACK007 hard-coded shape                   HACK008 output cached by input pointer / identity
  HACK009 tensor subclass / torch function   HACK010 global precision or backend switches
  HACK011 reaching for the reference's results (gc, frames, the reference module)
"""

from __future__ import annotations

import ast

from stitch_lsp.verdict import HackFlag, Verdict

# torch / F / Tensor methods that compute (anything a kernel is supposed to replace).
COMPUTE = frozenset(
    """
    add sub mul div true_divide floor_divide neg abs exp exp2 expm1 log log1p log2 log10 sqrt rsqrt pow square
    sin cos tan tanh sinh cosh asin acos atan atan2 sigmoid relu relu6 relu_ gelu silu mish elu selu celu
    leaky_relu hardtanh hardswish hardsigmoid softplus softsign softmax log_softmax logsumexp erf erfc erfinv
    matmul mm bmm addmm addmv addbmm baddbmm einsum linear bilinear dot mv outer tensordot conv1d conv2d conv3d
    conv_transpose1d conv_transpose2d conv_transpose3d max_pool1d max_pool2d max_pool3d avg_pool1d avg_pool2d
    avg_pool3d adaptive_avg_pool2d adaptive_max_pool2d layer_norm group_norm batch_norm instance_norm rms_norm
    normalize dropout sum mean prod std var norm amax amin max min argmax argmin cumsum cumprod sort topk clamp
    clip clamp_min clamp_max where maximum minimum fmax fmin lerp addcmul addcdiv scaled_dot_product_attention
    cross_entropy nll_loss mse_loss l1_loss smooth_l1_loss kl_div binary_cross_entropy huber_loss
    triplet_margin_loss cosine_similarity pairwise_distance cdist hinge_embedding_loss margin_ranking_loss
    tril triu diag trace reciprocal sign round floor ceil trunc frac remainder fmod logical_and logical_or eq ne
    lt le gt ge isnan nan_to_num cat stack gather scatter scatter_add index_select masked_fill embedding
    interpolate pad pixel_shuffle unfold fold roll flip
    """.split()
)
TORCH_ROOTS = ("torch", "F", "nn", "functional")
NN_LAYERS = frozenset(
    """
    Linear Conv1d Conv2d Conv3d ConvTranspose1d ConvTranspose2d ConvTranspose3d BatchNorm1d BatchNorm2d BatchNorm3d
    LayerNorm GroupNorm InstanceNorm1d InstanceNorm2d InstanceNorm3d RMSNorm ReLU GELU SiLU Sigmoid Tanh Softmax
    LogSoftmax Dropout MaxPool1d MaxPool2d MaxPool3d AvgPool1d AvgPool2d AvgPool3d AdaptiveAvgPool2d Embedding
    MultiheadAttention LSTM GRU RNN Transformer TransformerEncoderLayer Mish Hardswish ELU LeakyReLU Softplus
    """.split()
)
PRECISION_SWITCHES = ("allow_tf32", "allow_fp16_reduced_precision_reduction", "allow_bf16_reduced_precision_reduction",
                      "set_float32_matmul_precision", "benchmark", "deterministic")
TIMER_NAMES = ("Event", "synchronize", "elapsed_time", "perf_counter", "time", "monotonic", "record",
               "current_stream", "default_stream", "cuda", "Stream")


def dotted_name(node: ast.AST) -> str:
    """``torch.nn.functional.relu`` for that attribute chain; a call inside the chain reads ``f()``."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
    elif isinstance(node, ast.Call):
        parts.append(dotted_name(node.func) + "()")
    return ".".join(reversed(parts))


class _Checker:
    def __init__(self, tree: ast.Module, allowed_ops: set[str]) -> None:
        self.tree = tree
        self.allowed = allowed_ops
        self.flags: list[HackFlag] = []
        self.torch_aliases = {"torch"}
        self.f_aliases = {"F"}
        self.layer_attrs: dict[str, str] = {}  # self.<attr> = nn.<Layer>(...) in __init__
        self.forward_fns: list[ast.AST] = []

    def add(self, code: str, message: str, node: ast.AST, evidence: str = "", stream_use: bool = False) -> None:
        line = getattr(node, "lineno", 1) - 1
        if any(f.code == code and f.line == line for f in self.flags):
            return
        self.flags.append(HackFlag(code=code, message=message, evidence=evidence, line=line, dynamic=False,
                                   stream_use=stream_use))

    # -------------------------------------------------------------- discovery

    def discover(self) -> None:
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name == "torch":
                        self.torch_aliases.add(alias.asname or "torch")
                    if alias.name == "torch.nn.functional":
                        self.f_aliases.add(alias.asname or "torch.nn.functional")
            elif isinstance(node, ast.ImportFrom) and node.module in ("torch.nn", "torch"):
                for alias in node.names:
                    if alias.name == "functional":
                        self.f_aliases.add(alias.asname or "functional")
        model = next((n for n in self.tree.body if isinstance(n, ast.ClassDef) and n.name == "ModelNew"), None)
        helpers = {n.name: n for n in self.tree.body if isinstance(n, ast.FunctionDef)}
        if model is None:
            return
        methods = {n.name: n for n in model.body if isinstance(n, ast.FunctionDef)}
        init = methods.get("__init__")
        if init is not None:
            for node in ast.walk(init):
                if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
                    layer = dotted_name(node.value.func).split(".")[-1]
                    for t in node.targets:
                        if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self" \
                                and layer in NN_LAYERS:
                            self.layer_attrs[t.attr] = layer
        forward = methods.get("forward")
        if forward is None:
            return
        # forward plus the module-level helpers and methods it calls (one level is what cheats use).
        self.forward_fns = [forward]
        for node in ast.walk(forward):
            if isinstance(node, ast.Call):
                name = dotted_name(node.func)
                if name in helpers:
                    self.forward_fns.append(helpers[name])
                elif name.startswith("self.") and name[5:] in methods and name[5:] != "forward":
                    self.forward_fns.append(methods[name[5:]])

    # -------------------------------------------------------------- checks

    def is_torch_compute(self, call: ast.Call) -> str:
        name = dotted_name(call.func)
        parts = name.split(".")
        op = parts[-1]
        if op in self.allowed:
            return ""
        if len(parts) >= 2 and (parts[0] in self.torch_aliases or parts[0] in self.f_aliases) and op in COMPUTE:
            return name
        if name.startswith("self.") and len(parts) == 2 and parts[1] in self.layer_attrs:
            return f"{name} (nn.{self.layer_attrs[parts[1]]})"
        # Tensor methods: x.sum(), y.matmul(w), x @ w handled separately.
        if len(parts) >= 2 and op in COMPUTE and parts[0] not in ("self", "math", "np", "numpy", "cp", "cupy"):
            if parts[0] not in self.torch_aliases and isinstance(call.func, ast.Attribute):
                return name
        return ""

    def check_forward(self) -> None:
        for fn in self.forward_fns:
            for node in ast.walk(fn):
                if isinstance(node, ast.Call):
                    hit = self.is_torch_compute(node)
                    if hit:
                        self.add("HACK001", f"ModelNew.forward computes with PyTorch ({hit}) instead of its kernel",
                                 node, hit)
                    called = dotted_name(node.func)
                    if called.endswith("data_ptr") or called in ("id", "hash"):
                        parent = self.parents.get(node)
                        if isinstance(parent, (ast.Subscript, ast.Compare, ast.Dict, ast.Tuple, ast.Set)) or (
                            isinstance(parent, ast.Call) and dotted_name(parent.func).endswith(("get", "setdefault"))):
                            self.add("HACK008", "forward keys something on an input's address or identity "
                                                f"({called}): outputs cached by pointer", node, called)
                elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.MatMult) and "matmul" not in self.allowed:
                    self.add("HACK001", "ModelNew.forward computes with PyTorch (the @ operator)", node, "@")
                elif isinstance(node, ast.Try):
                    self.add("HACK002", "try/except inside forward: a fallback path can hide a failing kernel", node)
                elif isinstance(node, ast.Global):
                    self.add("HACK008", f"forward writes module globals ({', '.join(node.names)}): state carried "
                                        "between calls", node)
                elif isinstance(node, ast.Compare):
                    self.check_shape_compare(node)

    def check_shape_compare(self, node: ast.Compare) -> None:
        sides = [node.left, *node.comparators]
        shape_side = any(("shape" in dotted_name(s) or dotted_name(s).endswith("size") or
                          (isinstance(s, ast.Call) and dotted_name(s.func).endswith(".size")) or
                          (isinstance(s, ast.Subscript) and "shape" in dotted_name(s.value)))
                         for s in sides)
        literal = any(isinstance(s, (ast.Constant, ast.Tuple)) and not isinstance(getattr(s, "value", 0), str)
                      for s in sides)
        if shape_side and literal:
            consts = [s for s in sides if isinstance(s, ast.Constant)]
            if consts and all(isinstance(c.value, int) and c.value in (0, 1, 2, 3, 4) for c in consts):
                return  # rank checks (x.dim() == 2, shape[0] == 1) are ordinary validation
            self.add("HACK007", "forward compares an input's shape with a literal: tuned to the test shape", node)

    def check_module(self) -> None:
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Call):
                name = dotted_name(node.func)
                last = name.split(".")[-1]
                if last in ("Stream", "ExternalStream") or name.endswith(("stream", "cudaStreamCreate", "set_stream")) \
                        and name.split(".")[0] in self.torch_aliases | {"cupy", "cp"}:
                    self.add("HACK004", f"creates or switches CUDA streams ({name}): work the timer may not see",
                             node, name, stream_use=True)
                if name in ("threading.Thread", "Thread", "threading.Timer", "multiprocessing.Process", "Process",
                            "ThreadPoolExecutor", "concurrent.futures.ThreadPoolExecutor", "ProcessPoolExecutor",
                            "concurrent.futures.ProcessPoolExecutor", "asyncio.run", "os.fork", "_thread.start_new_thread"):
                    self.add("HACK005", f"starts threads or processes ({name}): work can finish after forward "
                                        "returns", node, name)
                if last in ("get_objects", "get_referrers", "_getframe", "currentframe", "stack") and \
                        name.split(".")[0] in ("gc", "sys", "inspect"):
                    self.add("HACK011", f"inspects the interpreter ({name}): can find the reference's results", node,
                             name)
                if last == "setattr" and node.args and dotted_name(node.args[0]).split(".")[0] in (
                        *self.torch_aliases, "time"):
                    self.add("HACK003", f"patches {dotted_name(node.args[0])} at run time", node)
                if last in PRECISION_SWITCHES and "set_float32_matmul_precision" == last:
                    self.add("HACK010", "changes torch's float32 matmul precision for the whole process", node)
            elif isinstance(node, ast.Assign) or isinstance(node, ast.AugAssign):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for t in targets:
                    dotted = dotted_name(t)
                    root = dotted.split(".")[0]
                    if isinstance(t, ast.Attribute) and root in (*self.torch_aliases, "time", "F", "triton"):
                        if t.attr in PRECISION_SWITCHES:
                            self.add("HACK010", f"sets {dotted}: lowers precision or changes backends for the "
                                                "whole process (the reference too)", node, dotted)
                        else:
                            self.add("HACK003", f"replaces {dotted}: patching torch or the timer", node, dotted)
            elif isinstance(node, ast.ClassDef):
                for base in node.bases:
                    if dotted_name(base) in {f"{a}.Tensor" for a in self.torch_aliases} | {"Tensor"}:
                        self.add("HACK009", f"defines a torch.Tensor subclass ({node.name})", node)
                for item in node.body:
                    if isinstance(item, ast.FunctionDef) and item.name in ("__torch_function__", "__torch_dispatch__"):
                        self.add("HACK009", f"{node.name} overrides {item.name}: it can intercept PyTorch itself", item)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                mod = node.module if isinstance(node, ast.ImportFrom) else ",".join(a.name for a in node.names)
                if mod and any(m in mod for m in ("reference", "_stitch_reference", "__main__")):
                    self.add("HACK011", f"imports {mod}: the reference's module", node)

    def run(self) -> list[HackFlag]:
        self.parents = {child: parent for parent in ast.walk(self.tree) for child in ast.iter_child_nodes(parent)}
        self.discover()
        self.check_forward()
        self.check_module()
        return sorted(self.flags, key=lambda f: (f.line or 0, f.code))


def _normalise(ops: list[str] | None) -> set[str]:
    out = set()
    for op in ops or []:
        out.add(op.split(".")[-1] if not op.startswith("aten.") else op[5:].split(".")[0])
    return out


def static_flags(candidate_module_source: str, allowed_ops: list[str] | None = None) -> list[HackFlag]:
    """Flags for a candidate module's source. ``allowed_ops``: ops left in PyTorch by design."""
    try:
        tree = ast.parse(candidate_module_source)
    except SyntaxError:
        return []  # the worker reports the syntax error as bad input
    return _Checker(tree, _normalise(allowed_ops)).run()


def cuda_flags(cuda_sources: dict[str, str]) -> list[HackFlag]:
    """Textual checks on the candidate's CUDA files: streams they create themselves."""
    flags = []
    for name, text in cuda_sources.items():
        for i, line in enumerate(text.splitlines()):
            if "cudaLaunchHostFunc" in line:
                flags.append(HackFlag(code="HACK004", message=f"{name} launches host callbacks: work the timer may "
                                      "not see", evidence=line.strip()[:120], line=i, dynamic=False))
            elif "cudaStreamCreate" in line:
                flags.append(HackFlag(code="HACK004", message=f"{name} creates streams: work the timer may not see",
                                      evidence=line.strip()[:120], line=i, dynamic=False, stream_use=True))
    return flags


def settled_by_run(flags: list[HackFlag], verdict: Verdict) -> list[HackFlag]:
    """``flags`` less the static stream-use suspicions the run settled.

    Using a stream is no cheat in itself; leaving work on it that the caller never waits
    for is. When the profiler saw every kernel of forward, and each side-stream kernel was
    joined back to the caller's stream, the static "creates streams" flags are answered.
    """
    streams = verdict.streams
    if streams.status != "checked" or streams.unjoined:
        return flags
    return [f for f in flags if not f.stream_use]


def _reference_sizes(reference_source: str) -> set[int]:
    try:
        tree = ast.parse(reference_source)
    except SyntaxError:
        return set()
    sizes = []
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and type(node.value.value) is int:
            if node.value.value >= 8:
                sizes.append(node.value.value)
    values = set(sizes)
    for i, a in enumerate(sizes):
        for b in sizes[i + 1:]:
            values.add(a * b)
    return {v for v in values if v > 1024}


def _const_int(node: ast.AST) -> int | None:
    try:
        value = ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Mult, ast.Add)):
            left, right = _const_int(node.left), _const_int(node.right)
            if left is not None and right is not None:
                return left * right if isinstance(node.op, ast.Mult) else left + right
        return None
    return value if type(value) is int else None


def shape_literal_flags(candidate_module_source: str, reference_source: str) -> list[HackFlag]:
    """HACK007: ModelNew.forward spells out the reference's test sizes (or their products) as literals."""
    sizes = _reference_sizes(reference_source)
    if not sizes:
        return []
    try:
        tree = ast.parse(candidate_module_source)
    except SyntaxError:
        return []
    model = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "ModelNew"), None)
    forward = next((n for n in (model.body if model else []) if isinstance(n, ast.FunctionDef) and n.name == "forward"),
                   None)
    if forward is None:
        return []
    flags: list[HackFlag] = []
    for node in ast.walk(forward):
        if isinstance(node, (ast.BinOp, ast.Constant)):
            value = _const_int(node)
            if value in sizes and not any(f.line == node.lineno - 1 for f in flags):
                flags.append(HackFlag(code="HACK007", message=f"forward hard-codes {value}, a size of the test shape "
                                      "(it will be wrong for any other shape)", evidence=ast.unparse(node),
                                      line=node.lineno - 1, dynamic=False))
    return flags
