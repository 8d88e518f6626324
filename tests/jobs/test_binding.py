"""The generated ModelNew launches the paired kernel as the pairing says.

Runs the binding on CPU tensors with the runtime loader replaced by a recorder
(the real launch is covered by the GPU end-to-end test)."""

from __future__ import annotations

import sys
import textwrap
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
