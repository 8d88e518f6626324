"""Generated pointwise kernels built for the host CPU (g++) and run against eager PyTorch on the CPU.

The kernel source is compiled as C++ with a small shim (blockIdx / threadIdx as globals, ``__ldg`` as a
plain load) and every thread of the launch is run in a loop, so index maps, cat branches, broadcasts,
rounding and the NaN / Inf behaviour of the expressions are checked without a GPU. The preamble's
PTX-only approximations fall back to the exact C functions on the host, so their accuracy is the GPU
run's to show (tests/fuse/test_fuse_gpu.py); everything around them is checked here.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from stitch_lsp.coders.template import binding, lower  # noqa: E402
from stitch_lsp.coders.template.program import program_data  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
GXX = shutil.which("g++")


def _cuda_include() -> Path | None:
    roots = [os.environ.get("CUDA_HOME", ""), "/usr/local/cuda"]
    nvcc = shutil.which("nvcc")
    if nvcc:
        roots.append(str(Path(nvcc).resolve().parents[1]))
    for root in roots:
        if root and (Path(root) / "include" / "cuda_bf16.h").exists():
            return Path(root) / "include"
    return None


INCLUDE = _cuda_include()
pytestmark = [pytest.mark.timeout(900),
              pytest.mark.skipif(GXX is None or INCLUDE is None, reason="needs g++ and the CUDA headers")]

SHIM = r"""
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector_types.h>
struct StitchDim3 { unsigned x = 0, y = 1, z = 1; };
static StitchDim3 blockIdx, threadIdx, blockDim, gridDim;
#define __global__
#define __launch_bounds__(...)
template <typename T> static inline T __ldg(const T* p) { return *p; }
static inline float __int_as_float(int i) { float f; std::memcpy(&f, &i, 4); return f; }
// glibc declares (but does not export) __expf and friends: macros, after <cmath>, stand in for the intrinsics.
#define __expf(x) expf(x)
#define __logf(x) logf(x)
#define __sinf(x) sinf(x)
#define __cosf(x) cosf(x)
#define __fdividef(a, b) ((a) / (b))
"""

C_TYPES = {"float32": "float", "float16": "__half", "bfloat16": "__nv_bfloat16", "bool": "unsigned char",
           "int64": "long long", "int32": "int"}


def driver_main(source: str, params: list[tuple[str, str]], n_in: int, launch, shim: str = SHIM) -> str:
    """``shim`` + the kernel + a main() that reads each parameter's buffer from a file, runs
    ``launch(args)``'s lines, and writes the outputs."""
    lines = ["int main(int argc, char** argv) {", "  (void)argc;"]
    for k, (dtype, _) in enumerate(params):
        lines.append(f"  FILE* f{k} = fopen(argv[{k + 1}], \"rb\"); fseek(f{k}, 0, SEEK_END); "
                     f"long n{k} = ftell(f{k}); fseek(f{k}, 0, SEEK_SET);")
        lines.append(f"  char* b{k} = (char*)aligned_alloc(64, (n{k} + 63) / 64 * 64 + 64); "
                     f"if (fread(b{k}, 1, n{k}, f{k}) != (size_t)n{k}) return 2; fclose(f{k});")
    args = ", ".join(f"({'const ' if k < n_in else ''}{C_TYPES[d]}*)b{k}" for k, (d, _) in enumerate(params))
    lines += launch(args)
    for k in range(n_in, len(params)):
        lines.append(f"  FILE* o{k} = fopen(argv[{k + 1}], \"wb\"); fwrite(b{k}, 1, n{k}, o{k}); fclose(o{k});")
    lines += ["  return 0;", "}"]
    return shim + source + "\n" + "\n".join(lines) + "\n"


def _driver(source: str, name: str, params: list[tuple[str, str]], n_in: int, grid: int, block: int) -> str:
    """Every thread of every block in turn (pointwise kernels have no barriers)."""
    return driver_main(source, params, n_in, lambda args: [
        f"  gridDim.x = {grid}; blockDim.x = {block};",
        f"  for (unsigned b = 0; b < {grid}; ++b) for (unsigned t = 0; t < {block}; ++t) {{",
        f"    blockIdx.x = b; threadIdx.x = t; {name}({args});", "  }"])


_HEADERS: dict[str, Path] = {}


def _header(text: str) -> Path:
    """The shim and the kernels' preamble (the same for every kernel) as a precompiled header, built once per test
    process and removed when it exits (each is about 50 MB)."""
    import atexit
    import hashlib
    import shutil
    import tempfile

    key = hashlib.sha256(text.encode()).hexdigest()[:16]
    if key not in _HEADERS:
        folder = tempfile.mkdtemp(prefix="stitch_host_")
        atexit.register(shutil.rmtree, folder, ignore_errors=True)
        path = Path(folder) / f"preamble_{key}.h"
        path.write_text(text)
        out = subprocess.run([GXX, "-std=c++17", "-O1", "-w", f"-I{INCLUDE}", "-x", "c++-header", "-o",
                              f"{path}.gch", str(path)], capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stderr[-3000:]
        _HEADERS[key] = path
    return _HEADERS[key]


def _run_kernel(step: dict, source: str, env: dict, tmp: Path) -> None:
    name = step["kernel"]
    exe = tmp / f"{name}.bin"
    if not exe.exists():
        params = [(env[a].dtype, a) for a in step["args"]]
        params = [(str(d).replace("torch.", ""), a) for d, a in params] + [(o[2], o[0]) for o in step["outputs"]]
        cpp = tmp / f"{name}.cpp"
        text = _driver(source, name, params, len(step["args"]), step["grid"], step["block"])
        # The shim and the preamble come first, then the kernel (its copies, for a cluster's ranks).
        cut = min(i for i in (text.find('extern "C"'), text.find("namespace stitch_r0")) if i >= 0)
        head, body = text[:cut], text[cut:]
        cpp.write_text(body)
        out = subprocess.run([GXX, "-std=c++17", "-O1", "-w", f"-I{INCLUDE}", "-include", str(_header(head)),
                              "-o", str(exe), str(cpp)], capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stderr[-3000:]
    files = []
    layouts = step.get("layouts") or {}
    strided = step.get("strided") or {}
    for k, a in enumerate(step["args"]):
        path = tmp / f"in{k}.raw"
        t = env[a].contiguous()
        if a in strided:  # read in place at these strides: the bytes of a tensor laid out so, gaps included
            t = torch.empty_strided(t.shape, strided[a], dtype=t.dtype).copy_(env[a])
            t = t.as_strided((t.untyped_storage().nbytes() // t.element_size(),), (1,))
        elif a in layouts:  # read in channels-last: its bytes in that order (channels innermost)
            t = env[a].contiguous(memory_format=getattr(torch, layouts[a]))
            t = t.permute(0, *range(2, t.dim()), 1)
        t = t.reshape(-1)  # a 0-d tensor views as bytes once it has a dimension
        raw = t.view(torch.uint8) if t.dtype != torch.bool else t.to(torch.uint8)
        path.write_bytes(raw.numpy().tobytes())
        files.append(path)
    outs = []
    for k, (o, shape, dtype, *fmt) in enumerate(step["outputs"]):
        if fmt:  # written in channels-last: its bytes in that order, channels innermost
            shape = [shape[0], *shape[2:], shape[1]]
        t = torch.full(shape, float("nan"), dtype=getattr(torch, dtype)) if dtype in ("float32", "float16", "bfloat16") \
            else torch.zeros(shape, dtype=getattr(torch, dtype))
        path = tmp / f"out{k}.raw"
        flat = t.reshape(-1)
        path.write_bytes((flat.view(torch.uint8) if t.dtype != torch.bool else flat.to(torch.uint8)).numpy().tobytes())
        files.append(path)
        outs.append((o, t, path, bool(fmt)))
    run = subprocess.run([str(exe)] + [str(f) for f in files], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    for o, t, path, physical in outs:
        data = torch.frombuffer(bytearray(path.read_bytes()), dtype=torch.uint8)
        env[o] = data.view(t.dtype).reshape(t.shape) if t.dtype != torch.bool else data.bool().reshape(t.shape)
        if physical:  # back to the logical (N, C, spatial...) order, its strides channels-last as on the GPU
            env[o] = env[o].permute(0, env[o].dim() - 1, *range(1, env[o].dim() - 1))


# The generated module's own runtime (how a step's argument spec is read), run here on the host's device.
_RUNTIME: dict = {"torch": torch, "json": json}
exec(binding._RUNTIME, _RUNTIME)


def _value(v, env):
    return _RUNTIME["_value"](v, env, torch.device("cpu"))


def _run_program(prog: dict, tensors: list, tmp: Path):
    """The binding's interpreter, with kernels run on the host."""
    env = dict(zip(prog["inputs"], tensors))
    for step in prog["steps"]:
        if "kernel" in step:
            _run_kernel(step, prog["sources"][step["kernel"]], env, tmp)
            continue
        if step["op"] == "getitem":
            env[step["name"]] = env[step["args"][0]["$"]][step["args"][1]]
            continue
        fn = torch.ops
        for part in step["op"].split("."):
            fn = getattr(fn, part)
        args = _value(step["args"], env)
        if step.get("layout"):  # a convolution run in channels-last, as the binding runs it
            layout = getattr(torch, step["layout"])
            convert = step.get("convert")
            if convert is not None and args[0].is_contiguous():  # the program's own kernel writes the input
                env["convert_in"] = args[0]
                _run_kernel({"kernel": convert["kernel"], "args": ["convert_in"], "grid": convert["grid"],
                             "block": convert["block"],
                             "outputs": [["convert_out", convert["shape"], str(args[0].dtype).replace("torch.", "")]]},
                            prog["sources"][convert["kernel"]], env, tmp)
                rank = len(convert["shape"])
                args[0] = env["convert_out"].permute(0, rank - 1, *range(1, rank - 1))
                assert args[0].is_contiguous(memory_format=layout)
            args[0], args[1] = args[0].contiguous(memory_format=layout), args[1].contiguous(memory_format=layout)
        env[step["name"]] = fn(*args, **_value(step["kwargs"], env))
    outs = [env[o] for o in prog["outputs"]]
    return tuple(outs) if prog["tuple"] else outs[0]


def _check(source: str, tmp: Path, sizes: dict | None = None, cases=("random", "nan", "inf", "large", "denormal")):
    """Trace ``source`` at ``sizes``, lower it, run its kernels on the host and compare with eager."""
    from stitch_lsp.worker.trace_handler import trace_task

    if sizes:
        source += "\n" + "\n".join(f"{k} = {v}" for k, v in sizes.items()) + "\n"
    reply = trace_task(source)
    assert reply.ok, reply.message
    program = lower(reply.graph)
    assert program.kernels and all(k.kind == "pointwise" for k in program.kernels), program.notes
    check_against_eager(source, program, cases, tmp)
    return program


def check_against_eager(source: str, program, cases, tmp: Path) -> None:
    """Run the lowered program on the host for each input case and compare with eager PyTorch."""
    from stitch_lsp.worker import inputs as inp
    from stitch_lsp.worker.verify.compare import compare

    prog = program_data(program)
    ns: dict = {}
    exec(compile(source, "task", "exec"), ns)
    torch.manual_seed(0)
    # In inference mode, as the Verifier runs the reference and as the graph was traced.
    model = ns["Model"](*ns["get_init_inputs"]()).eval()
    state = [t.detach() for t in list(model.parameters()) + list(model.buffers())]
    for case in cases:
        torch.manual_seed(1)
        values = ns["get_inputs"]()
        if case != "random":
            values = inp.adversarial(values, case, 3)
        with torch.no_grad():
            ref = model(*[v.clone() if isinstance(v, torch.Tensor) else v for v in values])
        # Numbers forward takes are baked into the program: only tensors are passed.
        got = _run_program(prog, state + [v.clone() for v in values if isinstance(v, torch.Tensor)], tmp)
        result = compare(ref, got)
        assert result.passed, f"{case}: {result.detail}"


BENCH = {
    "pw_activation_zoo_bf16": {"B": 2, "C": 4, "H": 6, "W": 8},
    "pw_activation_zoo_fp32": {"M": 16, "N": 40},
    "pw_bias_gelu_bf16": {"M": 16, "N": 40},
    "pw_elu_softplus_bf16": {"M": 16, "N": 48},
    "pw_geglu_fp32": {"M": 16, "N": 24},
    "pw_gelu_scale_fp32": {"M": 16, "N": 40},
    "pw_mish_hardswish_fp32": {"B": 2, "C": 4, "H": 6, "W": 10},
    # head_dim 16: the halves are 8 wide, so a bf16 chunk never straddles them (the per-chunk cat branch)
    "pw_rotary_embedding_bf16": {"B": 2, "S": 4, "H": 3, "D": 16},
    "pw_rotary_embedding_fp32": {"B": 2, "H": 3, "S": 4, "D": 16},
    "pw_scaled_residual_chain_bf16": {"M": 16, "N": 40},
    "pw_scaled_residual_chain_fp32": {"M": 16, "N": 40},
    "pw_swiglu_bf16": {"M": 16, "N": 40},
}


# CPU eager's GELU (erf form) gives NaN at +Inf where CUDA's gives +Inf (the kernels follow CUDA): no Inf case.
CPU_DIFFERS_AT_INF = {"pw_bias_gelu_bf16", "pw_gelu_scale_fp32", "pw_geglu_fp32"}


@pytest.mark.parametrize("name", sorted(BENCH))
def test_bench_pointwise_kernel_matches_eager_on_the_host(name, tmp_path):
    cases = ("random", "nan", "large", "denormal") + (() if name in CPU_DIFFERS_AT_INF else ("inf",))
    _check((REPO / "bench" / "tasks" / f"{name}.py").read_text(), tmp_path, BENCH[name], cases)


@pytest.mark.parametrize("sizes", [{"B": 2, "S": 3, "H": 3, "D": 10}, {"B": 1, "S": 5, "H": 2, "D": 12}],
                         ids=["odd-halves", "halves-straddle-chunks"])
def test_rotary_with_halves_that_straddle_a_chunk(sizes, tmp_path):
    """Halves of 5 or 6: chunks cross the cat boundary, so the cat is decided per element."""
    _check((REPO / "bench" / "tasks" / "pw_rotary_embedding_bf16.py").read_text(), tmp_path, sizes,
           cases=("random", "nan"))


PERMUTE = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x, y):
        return torch.sigmoid(x.transpose(1, 2) * 2.0 + y) / (1.0 + y * y)


def get_inputs():
    return [torch.randn(2, 24, 16), torch.randn(2, 16, 24)]


def get_init_inputs():
    return []
"""


def test_transposed_operand_in_a_pointwise_chain(tmp_path):
    _check(PERMUTE, tmp_path, cases=("random", "inf"))


ACTIVATIONS = """
import torch
import torch.nn as nn
import torch.nn.functional as F

DTYPE = torch.{dtype}


class Model(nn.Module):
    def forward(self, x, y):
        a = F.softplus(x / y, beta=2.0, threshold=1.0) + F.selu(x) + F.hardtanh(y, -0.5, 0.75)
        b = F.leaky_relu(x, 0.1) * torch.sigmoid(y) + F.silu(x) - torch.relu(y) * F.mish(y)
        c = torch.maximum(x, y) - torch.minimum(x, 2.0 * y) + torch.clamp(x, min=-1.0) / (1.0 + y * y)
        d = torch.where(x > y, F.hardswish(x), torch.reciprocal(y)) + F.elu(y, alpha=0.3) + F.gelu(x, approximate="tanh")
        return a * 0.5 + b - c + d


def get_inputs():
    return [torch.randn(8, 48, dtype=DTYPE) * 3, torch.randn(8, 48, dtype=DTYPE) + 0.1]


def get_init_inputs():
    return []
"""


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_activation_forms_keep_eager_values_and_nan_inf(dtype, tmp_path):
    """Every cheaper form (division, clamps, ELU / SELU, softplus with a low threshold, SiLU, Mish, GELU-tanh)."""
    _check(ACTIVATIONS.format(dtype=dtype), tmp_path, cases=("random", "nan", "inf", "large", "signed-zero"))
