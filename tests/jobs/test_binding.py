"""The generated ModelNew launches the paired kernel as the pairing says.

Runs the binding on CPU tensors with the runtime loader replaced by a recorder
(the real launch is covered by the GPU end-to-end test)."""

from __future__ import annotations

import sys
import types

import pytest

from stitch_lsp.jobs.binding import build_candidate
from tests.jobs.test_pairing import pair

torch = pytest.importorskip("torch")

CU = """
    // stitch: reference=ref/softmax_ref.py
    // stitch: grid=x.shape[0] block=128 shared=block * 4 args=x, out, x.shape[0], x.shape[1]
    __global__ void softmax_kernel(const float* x, float* out, int rows, int cols) {
    }
"""


class RecordingKernel:
    launches: list = []

    def __call__(self, grid, block, args, shared_mem=0, stream=None):
        RecordingKernel.launches.append((grid, block, args, shared_mem))


def _run_binding(source: str, *inputs):
    loader = types.ModuleType("stitch_lsp.runtime.loader")
    loaded = []

    def load_kernel(src, name, **kw):
        loaded.append((name, kw))
        return RecordingKernel()

    loader.load_kernel = load_kernel
    loader.Kernel = object
    loader.KernelCompileError = RuntimeError
    loader.parse_nvrtc_log = lambda log, filename: (log, [])
    saved = sys.modules.get("stitch_lsp.runtime.loader")
    sys.modules["stitch_lsp.runtime.loader"] = loader
    try:
        ns: dict = {"__name__": "candidate"}
        exec(compile(source, "candidate.py", "exec"), ns)
        model = ns["ModelNew"]()
        out = model(*inputs)
    finally:
        if saved is not None:
            sys.modules["stitch_lsp.runtime.loader"] = saved
        else:
            del sys.modules["stitch_lsp.runtime.loader"]
    return out, loaded


def test_binding_launches_with_the_pairing_grid_block_and_args(tmp_path):
    res = pair(tmp_path, CU)
    [p] = res.pairs
    cu_text = (tmp_path / "softmax.cu").read_text()
    cand = build_candidate(p, cu_text)
    assert cand.cuda_sources == {"softmax.cu": cu_text}
    RecordingKernel.launches.clear()
    x = torch.randn(8, 33)
    out, loaded = _run_binding(cand.module_source, x)
    assert loaded[0][0] == "softmax_kernel"
    [(grid, block, args, shared)] = RecordingKernel.launches
    assert (grid, block, shared) == (8, 128, 512)
    assert args[0] is x and args[1] is out and args[2:] == [8, 33]
    assert out.shape == x.shape


def test_default_launch_covers_every_element(tmp_path):
    res = pair(tmp_path, """
        // stitch: reference=ref/softmax_ref.py
        __global__ void relu_kernel(const float* x, float* y, int n) {
        }
    """)
    cand = build_candidate(res.pairs[0], "...")
    RecordingKernel.launches.clear()
    out, _ = _run_binding(cand.module_source, torch.randn(1000))
    [(grid, block, args, _)] = RecordingKernel.launches
    assert block == 256 and grid == 4 and args[2] == 1000


def test_user_binding_is_used_verbatim(tmp_path):
    (tmp_path / "b.py").write_text("class ModelNew:\n    pass\n")
    res = pair(tmp_path, """
        // stitch: reference=ref/softmax_ref.py binding=b.py
        __global__ void k(const float* x, float* y, int n) {
        }
    """)
    assert build_candidate(res.pairs[0], "src").module_source == "class ModelNew:\n    pass\n"


def test_generated_binding_raises_no_anti_hacking_flag(tmp_path):
    from stitch_lsp.verify.anti_hacking import cuda_flags, static_flags

    res = pair(tmp_path, CU)
    cand = build_candidate(res.pairs[0], (tmp_path / "softmax.cu").read_text())
    assert static_flags(cand.module_source) == []
    assert cuda_flags(cand.cuda_sources) == []


HOST_CU = """
    #include <cstdio>
    #include <cuda_runtime.h>

    // stitch: reference=ref/softmax_ref.py
    __global__ void relu_kernel(const float* x, float* y, int n) {
        int i = blockIdx.x * blockDim.x + threadIdx.x;
        if (i < n) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
    }

    int main() {
        float* d;
        cudaMalloc(&d, 16);
        relu_kernel<<<1, 4>>>(d, d, 4);
        printf("ok\\n");
        return 0;
    }
"""


def _fallback_loader(monkeypatch, made):
    """The real loader's error type and log parser; NVRTC refusing (as it does host code); a recording Kernel."""
    from stitch_lsp.runtime import loader as real

    class FakeKernel:
        def __init__(self, name, mangled, image, **kw):
            made.append((name, mangled, image))

    def load_kernel(*a, **kw):
        raise real.KernelCompileError("k", "a.cu", "NVRTC: host code", [])

    fake = types.ModuleType("stitch_lsp.runtime.loader")
    fake.load_kernel, fake.Kernel = load_kernel, FakeKernel
    fake.KernelCompileError, fake.parse_nvrtc_log = real.KernelCompileError, real.parse_nvrtc_log
    monkeypatch.setitem(sys.modules, "stitch_lsp.runtime.loader", fake)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: (9, 0))
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    return real.KernelCompileError


@pytest.mark.nvcc
def test_file_with_host_code_falls_back_to_nvcc_ptx(tmp_path, monkeypatch):
    """NVRTC refuses host code; the binding then builds PTX with nvcc and finds the mangled entry."""
    res = pair(tmp_path, HOST_CU)
    cand = build_candidate(res.pairs[0], (tmp_path / "softmax.cu").read_text())
    made: list = []
    _fallback_loader(monkeypatch, made)
    exec(compile(cand.module_source, "candidate.py", "exec"), {"__name__": "candidate"})
    [(name, mangled, image)] = made
    assert name == "relu_kernel" and mangled == "_Z11relu_kernelPKfPfi"
    assert image.endswith(b"\0") and b".entry _Z11relu_kernelPKfPfi" in image


@pytest.mark.nvcc
def test_nvcc_errors_come_back_as_a_compile_error_at_their_line(tmp_path, monkeypatch):
    res = pair(tmp_path, HOST_CU.replace("x[i] > 0.0f", "undefined_name > 0.0f"))
    cand = build_candidate(res.pairs[0], (tmp_path / "softmax.cu").read_text())
    compile_error = _fallback_loader(monkeypatch, [])
    with pytest.raises(compile_error) as info:
        exec(compile(cand.module_source, "candidate.py", "exec"), {"__name__": "candidate"})
    [diag] = [d for d in info.value.diagnostics if d.severity == "error"]
    assert diag.file == "softmax.cu" and diag.line == 7 and "undefined_name" in diag.message
