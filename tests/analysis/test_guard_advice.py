"""The guard STC001 suggests is phrased in the kernel's own names, or names none."""

from __future__ import annotations

import pytest

from stitch_lsp.analysis.cuda_analysis import CudaAnalyzer

from .test_examples_and_fixes import apply_edits

CASES = [
    # (kernel, the guard the message and the fix use; None: the message names no size and there is no fix)
    ("__global__ void k(float* y, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; y[i] = 1.0f; }",
     "i < n"),
    ("__global__ void k(float* y, unsigned numElements) {\n"
     "  unsigned idx = blockIdx.x * blockDim.x + threadIdx.x; y[idx] = 1.0f; }", "idx < numElements"),
    ("__global__ void k(float* img, int width, int height) {\n"
     "  int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;\n"
     "  img[y * width + x] = 0.0f; }", "x < width && y < height"),
    ("__global__ void k(float* img, int imgw, int imgh) {\n"
     "  int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;\n"
     "  int i = y * imgw + x; img[i] = 0.0f; }", "x < imgw && y < imgh"),
    # The size the kernel already checks this index against elsewhere.
    ("__global__ void k(const float* __restrict__ x, float* y, int count, int step) {\n"
     "  int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < count) y[i] = x[i]; y[i + 0] = 0.0f; }",
     "i + 0 < count"),
    # Two sizes it cannot choose between.
    ("__global__ void k(float* y, int rows_count, int cols_count) {\n"
     "  int i = blockIdx.x * blockDim.x + threadIdx.x; y[i] = 1.0f; }", None),
    # Only a width: the height is not known.
    ("__global__ void k(float* img, unsigned width) {\n"
     "  unsigned x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;\n"
     "  img[y * width + x] = 0.0f; }", None),
]


@pytest.mark.parametrize("src,guard", CASES)
def test_stc001_guard_uses_the_kernels_names(src, guard):
    (f,) = [f for f in CudaAnalyzer("g.cu").analyze(src).findings if f.code == "STC001"]
    if guard is None:
        assert f.fix is None and "Guard it by comparing" in f.message and " < n" not in f.message
        return
    assert f"`if ({guard})`" in f.message
    fixed = apply_edits(src, f.fix.edits)
    assert f"if ({guard}) " in fixed
    assert not [g for g in CudaAnalyzer("g.cu").analyze(fixed).findings if g.code == "STC001"]


@pytest.mark.parametrize("src", [
    "__global__ void k(char* buf, char value) { buf[blockDim.x * blockIdx.x + threadIdx.x] = value; }",
    "__global__ void k(int* data, int inc) { int idx = blockIdx.x * blockDim.x + threadIdx.x; data[idx] += inc; }",
])
def test_a_kernel_that_takes_no_size_gets_a_hint_that_invents_none(src):
    (f,) = [f for f in CudaAnalyzer("g.cu").analyze(src).findings if f.code == "STC001"]
    assert f.severity.name == "HINT" and f.fix is None
    assert "the grid exactly covers the array" in f.message and " < " not in f.message
