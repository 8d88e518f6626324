"""Each rule scope the Programming Guide or compute-sanitizer sets (scope_cases.py): the
rule fires on the line marked in the version with the hazard, and nowhere in the version
without it. Also: analysis that survives what tree-sitter cannot read."""

from __future__ import annotations

import pytest

from stitch_lsp.analysis.cuda_analysis import CudaAnalyzer

from .scope_cases import CASES


def _lines(text: str, code: str) -> list[int]:
    return sorted(f.range.start.line for f in CudaAnalyzer("case.cu").analyze(text).findings if f.code == code)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_rule_fires_on_the_hazard_and_not_on_its_fix(case):
    marked = [i for i, line in enumerate(case.bad.split("\n")) if "/*!*/" in line]
    assert _lines(case.bad, case.rule) == marked
    assert _lines(case.good, case.rule) == []


def test_statement_tree_sitter_cannot_read_costs_only_that_statement():
    src = """template <typename K>
__global__ void scan(typename K::input_t* x, float* y, int n) {
  extern __shared__ char smem[];
  float vals[4];
  typename K::BlockLoadT(smem).Load(x, vals, n);
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  y[i] = vals[0];
}
"""
    a = CudaAnalyzer("cub.cu").analyze(src)
    (k,) = a.kernels
    assert k.parse_ok  # analysed, not skipped whole
    codes = [(f.code, f.range.start.line) for f in a.findings]
    assert ("STC001", 6) in codes  # the unguarded store after the unreadable line is still found
    (note,) = [f for f in a.findings if f.code == "parse"]
    assert note.range.start.line == 4
    assert "`typename K::BlockLoadT(smem).Load(x, vals, n);`" in note.message
    assert "may well be valid" in note.message


def test_unknown_statement_may_be_a_barrier():
    # The unreadable statement sits between the write and the read of shared memory: it may
    # be a barrier (CUB's block primitives are), so no race is claimed across it.
    src = """template <typename K>
__global__ void k(float* y) {
  __shared__ float s[256];
  s[threadIdx.x] = y[threadIdx.x];
  typename K::BlockSync(s).Sync();
  y[threadIdx.x] = s[(threadIdx.x + 1) % 256];
}
"""
    assert _lines(src, "STC003") == []
    assert _lines(src.replace("  typename K::BlockSync(s).Sync();\n", ""), "STC003") == [4]


def test_macro_with_a_block_argument_keeps_its_body():
    src = """__global__ void k(float* y, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] = 0; }
void run(float* y, int n, int type) {
  MY_DISPATCH(type, T, {
    int blocks = (n + 255) / 256;
    k<<<blocks, 256>>>(y, n);
  });
}
int main() { run(nullptr, 1 << 20, 0); return 0; }
"""
    a = CudaAnalyzer("dispatch.cu").analyze(src)
    assert [l.kernel for l in a.launches] == ["k"]
    assert any(f.code == "STC009" for f in a.findings)  # the launch inside the block is checked for


def test_attribute_and_instantiation_macros():
    src = """#define INSTANTIATE(T) template __global__ void k<T>(T*, int);
template <typename T>
C10_LAUNCH_BOUNDS_1(256)
__global__ void k(T* y, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] = 0; }
INSTANTIATE(float)
INSTANTIATE(double)
template <typename T>
CUTLASS_DEVICE void helper(T* y) { y[threadIdx.x] = 0; }
__global__ void after(float* y, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; y[i] = 0; }
"""
    a = CudaAnalyzer("macros.cu").analyze(src)
    assert a.parse_ok
    k = next(k for k in a.kernels if k.name == "k")
    assert k.launch_bounds is not None and "256" in k.launch_bounds
    assert [d.name for d in a.device_functions] == ["helper"]
    assert [(f.code, f.range.start.line) for f in a.findings if f.code.startswith("STC0")] == [("STC001", 8)]


def test_pragma_between_a_loop_and_its_body():
    src = """__global__ void k(const float* x, float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n)
#pragma unroll
    for (int j = 0; j < 4; j++) y[i] += x[i];
}
"""
    a = CudaAnalyzer("pragma.cu").analyze(src)
    assert a.parse_ok and all(k.parse_ok for k in a.kernels)


def test_amd_only_branch_is_not_the_one_analysed():
    src = """__device__ float reduce(float v) {
#if USE_ROCM
  return v + __shfl_xor(v, 16, 32);
#else
  return v + __shfl_xor_sync(0xffffffff, v, 16, 32);
#endif
}
"""
    a = CudaAnalyzer("hip.cu").analyze(src)
    assert [f.code for f in a.findings if f.code == "STC011"] == []
    assert [f.code for f in CudaAnalyzer("hip2.cu").analyze(src.replace("USE_ROCM", "USE_LEGACY")).findings
            if f.code == "STC011"] == ["STC011"]


def test_macro_with_a_statement_argument_keeps_the_statement():
    src = """__global__ void k(float* y, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] = 0; }
void run(float* y, int n, int type) {
  DISPATCH_FLOAT_AND_HALF(type, "k",
    k<<<(n + 255) / 256, 256>>>(y, n);)
  int m = n;
}
"""
    a = CudaAnalyzer("dispatch2.cu").analyze(src)
    assert [(l.kernel, l.range.start.line) for l in a.launches] == [("k", 3)]
    assert not [f for f in a.findings if f.code == "parse"]  # modelled, nothing skipped


def test_unknown_statement_may_be_the_bounds_check():
    # The statement tree-sitter cannot read may return early for threads past the end:
    # the store after it is not called unguarded.
    src = """template <typename K>
__global__ void k(float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (typename K::Guard(i).Out(n)) return;
  y[i] = 0.0f;
}
"""
    a = CudaAnalyzer("guard.cu").analyze(src)
    assert [f.code for f in a.findings if f.code.startswith("STC")] == []
    assert [f.range.start.line for f in a.findings if f.code == "parse"] == [3]
    # One that cannot leave the function is no check.
    plain = CudaAnalyzer("guard2.cu").analyze(src.replace("if (typename K::Guard(i).Out(n)) return;",
                                                          "typename K::Guard(i).Touch(n);"))
    assert [(f.code, f.range.start.line) for f in plain.findings if f.code.startswith("STC")] == [("STC001", 4)]


def test_extended_lambda_and_constexpr_specialisation():
    src = """template <bool kIsEven>
__global__ void k(float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if constexpr (kIsEven) {
    y[i] = 1.0f;
  } else {
    if (i < n) y[i] = 1.0f;
  }
}
void run(float* y, int n) {
  auto twice = [=] __device__ (int i) { return i * 2; };
}
"""
    a = CudaAnalyzer("lambda.cu").analyze(src)
    assert a.parse_ok  # the extended lambda reads like any other
    # The even specialisation's store is the launcher's contract: a hint, not a warning.
    assert [(f.code, f.severity.name, f.range.start.line) for f in a.findings] == [("STC001", "HINT", 4)]
