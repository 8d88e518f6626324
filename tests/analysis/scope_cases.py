"""Kernels for the rule scopes of the CUDA Programming Guide and compute-sanitizer: each
case has a version with the hazard and one without, the rule that must fire on the first
and stay quiet on the second, and (for memory, race and barrier hazards) the sanitizer
tool and launch that show the hazard happen. Used by the CPU tests (test_rule_scopes.py)
and the GPU tests (test_rules_on_gpu.py)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ScopeCase:
    name: str
    rule: str
    bad: str  # the rule fires here, at the line holding `/*!*/`
    good: str  # the rule is quiet here
    tool: str | None = None  # compute-sanitizer tool that sees the hazard (None: judged by reading)
    launch: str = ""  # launch statement for the harness (x, w, y: 4096 floats; n = 1024)


CASES = (
    # Programming Guide: __syncthreads() is allowed in conditional code only if the condition
    # evaluates identically across the entire thread block. No barrier after the `if`.
    ScopeCase(
        "divergent_barrier", "STC002",
        bad="""__global__ void fold(float* y) {
  __shared__ float s[256];
  int t = threadIdx.x;
  s[t] = y[t];
  if (t < 128) {
    /*!*/__syncthreads();
    s[t] += s[t + 128];
  }
  y[t] = s[t];
}""",
        good="""__global__ void fold(float* y) {
  __shared__ float s[256];
  int t = threadIdx.x;
  s[t] = y[t];
  __syncthreads();
  if (t < 128) s[t] += s[t + 128];
  __syncthreads();
  y[t] = s[t];
}""",
        # synccheck reported 0 errors for this on an H200 (sm_90, CUDA 13.0, 2026-11-28), as on the
        # H100 before: independent thread scheduling leaves no divergence for it to see. The rule rests
        # on the Programming Guide alone (docs/rules/STC002.md).
        tool=None, launch="fold<<<1, 256>>>(y);"),
    # The same with a condition that splits a warp (threads 96..99 take the branch, 100..127
    # do not): synccheck reported nothing for this either on the H200.
    ScopeCase(
        "divergent_barrier_in_warp", "STC002",
        bad="""__global__ void fold100(float* y) {
  __shared__ float s[256];
  int t = threadIdx.x;
  s[t] = y[t];
  if (t < 100) {
    /*!*/__syncthreads();
    s[t] += s[t + 100];
  }
  y[t] = s[t];
}""",
        good="""__global__ void fold100(float* y) {
  __shared__ float s[256];
  int t = threadIdx.x;
  s[t] = y[t];
  __syncthreads();
  if (t < 100) s[t] += s[t + 100];
  __syncthreads();
  y[t] = s[t];
}""",
        tool=None, launch="fold100<<<1, 256>>>(y);"),
    # A pointer to the thread's own row of a shared array: nothing another thread writes.
    # Through a pointer to the whole array, the neighbour's slot is read with no barrier.
    ScopeCase(
        "shared_row_pointer", "STC003",
        bad="""__global__ void rows(const float* x, float* y) {
  __shared__ float cs[64][17];
  float* all = &cs[0][0];
  all[threadIdx.x] = x[threadIdx.x];
  float v = /*!*/all[(threadIdx.x + 1) % 64];
  y[threadIdx.x] = v;
}""",
        good="""__global__ void rows(const float* x, float* y) {
  __shared__ float cs[64][17];
  float* local = &cs[threadIdx.x][0];
  for (int j = 0; j < 16; ++j) local[j] = x[threadIdx.x * 16 + j];
  float acc = 0.0f;
  for (int j = 0; j < 16; ++j) acc += local[j];
  y[threadIdx.x] = acc;
}""",
        tool="racecheck", launch="rows<<<1, 64>>>(x, y);"),
    # `c < count ? w[c] : 0` where the kernel's own check says `w` has `n` elements.
    ScopeCase(
        "read_under_ternary", "STC020",
        bad="""__global__ void weigh(const float* x, const float* w, float* y, int n, int count) {
  int c = blockIdx.x * blockDim.x + threadIdx.x;
  float v = c < count ? /*!*/w[c] : 0.0f;
  if (c < n) y[c] = x[c] * v;
}""",
        good="""__global__ void weigh(const float* x, const float* w, float* y, int n, int count) {
  int c = blockIdx.x * blockDim.x + threadIdx.x;
  float v = c < n && c < count ? w[c] : 0.0f;
  if (c < n) y[c] = x[c] * v;
}""",
        tool="memcheck", launch="weigh<<<5, 256>>>(x, w, y, 1024, 1280);"),
    # One thread stores the strided value; the many-thread copy in the `else` is the finding.
    ScopeCase(
        "single_thread_branch", "STC005",
        bad="""__global__ void gather(const float* x, float* y, int stride) {
  int t = blockIdx.x * blockDim.x + threadIdx.x;
  if (threadIdx.x == 0) {
    y[t * stride] = 0.0f;
  } else {
    y[/*!*/t * stride] = x[t];
  }
}""",
        good="""__global__ void gather(const float* x, float* y, int stride) {
  int t = blockIdx.x * blockDim.x + threadIdx.x;
  if (threadIdx.x == 0) {
    y[t * stride] = 0.0f;
  } else {
    y[t] = x[t];
  }
}"""),
    # A PyTorch element count squeezed into 32 bits on the host, inside a dispatch macro's host function.
    ScopeCase(
        "host_numel", "STC007",
        bad="""#include <torch/extension.h>
__global__ void fill(float* y, int64_t n) {
  int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = 0.0f;
}
void run(at::Tensor y) {
  int n = /*!*/y.numel();
  AT_DISPATCH_FLOATING_TYPES(y.scalar_type(), "fill", [&] {
    fill<<<(n + 255) / 256, 256>>>(y.data_ptr<float>(), n);
  });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}""",
        good="""#include <torch/extension.h>
__global__ void fill(float* y, int64_t n) {
  int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = 0.0f;
}
void run(at::Tensor y) {
  int64_t n = y.numel();
  AT_DISPATCH_FLOATING_TYPES(y.scalar_type(), "fill", [&] {
    fill<<<(n + 255) / 256, 256>>>(y.data_ptr<float>(), n);
  });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}"""),
    # A loop over one row's width (one block per row) is not an overflow; a grid-stride walk is.
    ScopeCase(
        "row_width_loop", "STC007",
        bad="""__global__ void copy_all(const float* x, float* y, int64_t total) {
  for (/*!*/int i = blockIdx.x * blockDim.x + threadIdx.x; i < total; i += blockDim.x * gridDim.x) y[i] = x[i];
}""",
        good="""__global__ void copy_row(const float* x, float* y, int64_t width) {
  for (int c = threadIdx.x; c < width; c += blockDim.x) y[blockIdx.x * width + c] = x[blockIdx.x * width + c];
}"""),
    # `1.0 - smoothing` once per thread costs nothing; inside the per-element loop it is FP64 work.
    ScopeCase(
        "once_per_thread_literal", "STC015",
        bad="""__global__ void smooth(const float* x, float* y, int n, float smoothing) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  for (int k = i; k < n; k += blockDim.x * gridDim.x) y[k] = x[k] * /*!*/0.5;
}""",
        good="""__global__ void smooth(const float* x, float* y, int n, float smoothing) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  float keep = 1.0 - smoothing;
  for (int k = i; k < n; k += blockDim.x * gridDim.x) y[k] = x[k] * keep;
}"""),
)
