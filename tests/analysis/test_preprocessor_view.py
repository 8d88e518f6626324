"""The rules see one configuration of a file: one branch of each `#if`, as the compiler would."""

from __future__ import annotations

from stitch_lsp.analysis.cuda_analysis import CudaAnalyzer
from stitch_lsp.analysis.cuda_preproc import preprocess


def kept(src: str) -> list[str]:
    view = preprocess(src.encode()).text.decode()
    assert len(view) == len(src) and view.count("\n") == src.count("\n")
    return [line.strip() for line in view.split("\n") if line.strip()]


def test_first_branch_is_kept_unless_the_file_decides():
    assert kept("#ifdef DEBUG\na();\n#else\nb();\n#endif\n") == ["a();"]
    assert kept("#if 0\na();\n#elif 0\nb();\n#else\nc();\n#endif\n") == ["c();"]
    assert kept("#define USE_SHARED 0\n#if USE_SHARED\na();\n#else\nb();\n#endif\n") == ["#define USE_SHARED 0", "b();"]
    assert kept("#define FAST\n#ifndef FAST\na();\n#else\nb();\n#endif\n") == ["#define FAST", "b();"]
    assert kept("#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800\na();\n#else\nb();\n#endif\n") == ["a();"]
    # Nested groups inside a branch that is not kept stay blank.
    assert kept("#if 0\n#ifdef X\na();\n#endif\n#else\nb();\n#endif\n") == ["b();"]


def test_directives_inside_a_parameter_list_no_longer_break_the_kernel():
    src = ("__global__ void k(float* y,\n#ifndef FIXED\n int w,\n#endif\n int n) {\n"
           "  __shared__ unsigned char __align__(8) buf[64];\n"
           "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  y[i] = buf[0] + w;\n}\n")
    a = CudaAnalyzer("p.cu").analyze(src)
    assert a.parse_ok, a.syntax_errors
    (k,) = a.kernels
    assert [p.name for p in k.params] == ["y", "w", "n"]
    (f,) = [f for f in a.findings if f.code == "STC001"]
    assert f.range.start.line == 7 and f.range.start.character == 2


def test_a_shared_array_in_one_branch_and_a_local_in_the_other_are_not_merged():
    src = """
__global__ void k(float* out, const float* in) {
#if USE_SHARED
    __shared__ float v[4 * 128];
    v[threadIdx.x] = in[threadIdx.x];
    __syncthreads();
#else
    float v[4];
    v[0] = in[threadIdx.x];
#endif
    out[threadIdx.x] = v[0];
}
"""
    a = CudaAnalyzer("m.cu").analyze(src)
    assert [(f.code, f.range.start.line) for f in a.findings if f.code == "STC003"] == []
    assert [d.name for d in a.shared_decls] == ["v"]
