"""The analysis API: kernels, launches, shared memory, barriers, positions, broken input."""

from __future__ import annotations

from stitch_lsp.analysis.cuda_analysis import CudaAnalyzer, analyze_cuda, kernel_at
from stitch_lsp.findings import Position

SOURCE = """\
#include <cuda_runtime.h>
#define BLOCK 256
template <typename T, int BS>
__global__ void __launch_bounds__(BS, 2) scale(const T* __restrict__ x, T* y, float a, int n) {
    __shared__ float tile[BS];
    extern __shared__ float dyn[];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    tile[threadIdx.x] = x[i];
    __syncthreads();
    y[i] = a * tile[threadIdx.x];
}
extern "C" __global__ void fill(float* out) { out[0] = 1.0f; }
__host__ __device__ inline float twice(float v) { return 2.0f * v; }
static __device__ __forceinline__ float lane_sum(float v) { return v; }
void run(const float* x, float* y, int n, cudaStream_t s) {
    scale<float, BLOCK><<<(n + BLOCK - 1) / BLOCK, BLOCK, 0, s>>>(x, y, 2.0f, n);
    cudaError_t err = cudaGetLastError();
    fill<<<1, 32>>>(y);
    cudaGetLastError();
}
"""


def test_kernels_params_and_qualifiers():
    a = analyze_cuda(SOURCE, "k.cu")
    assert a.parse_ok and a.syntax_errors == ()
    assert [k.name for k in a.kernels] == ["scale", "fill"]
    assert [k.name for k in a.device_functions] == ["twice", "lane_sum"]
    scale = a.kernels[0]
    assert scale.is_template and scale.is_global and scale.launch_bounds == "BS, 2"
    assert scale.range.start.line == 2  # the template header belongs to the kernel
    assert scale.name_range.start == Position(3, 41)
    x, y, alpha, n = scale.params
    assert (x.name, x.is_pointer, x.is_const, x.is_restrict) == ("x", True, True, True)
    assert x.type_text == "const T* __restrict__"
    assert (y.is_pointer, y.is_const, y.is_restrict) == (True, False, False)
    assert not alpha.is_pointer and n.type_text == "int"
    assert a.device_functions[0].is_host


def test_launches_shared_and_barriers():
    a = analyze_cuda(SOURCE, "k.cu")
    first, second = a.launches
    assert first.kernel == "scale" and first.grid == "(n + BLOCK - 1) / BLOCK"
    assert (first.block, first.shared_mem, first.stream, first.block_threads) == ("BLOCK", "0", "s", 256)
    assert second.kernel == "fill" and second.block_threads == 32 and second.stream is None
    assert first.config_range.start == Position(16, 23)
    assert [(s.name, s.size_text, s.is_extern) for s in a.shared_decls] == [("tile", "BS", False), ("dyn", None, True)]
    assert [b.name for b in a.barriers] == ["__syncthreads"] and a.barriers[0].range.start.line == 9


def test_kernel_at_name_body_and_launch_site():
    a = analyze_cuda(SOURCE, "k.cu")
    assert kernel_at(a, Position(3, 43)).name == "scale"
    assert kernel_at(a, Position(2, 3)).name == "scale"  # on the template header
    assert kernel_at(a, Position(3, 70)).name == "scale"  # on a parameter
    assert kernel_at(a, Position(8, 10)).name == "scale"
    assert kernel_at(a, Position(16, 8)).name == "scale"  # on the launch
    assert kernel_at(a, Position(18, 6)).name == "fill"
    assert kernel_at(a, Position(1, 3)) is None


def test_non_ascii_columns_are_code_points():
    src = '__global__ void k(float* y, int n) { /* ünïcødé ✓ */ int i = blockIdx.x * blockDim.x + threadIdx.x; y[i] = 1; }\n'
    a = analyze_cuda(src, "u.cu")
    (f,) = [f for f in a.findings if f.code == "STC001"]
    col = src.index("y[i]")
    assert f.range.start == Position(0, col) and f.range.end == Position(0, col + 4)


def test_broken_function_has_no_findings_but_clean_ones_do():
    src = """\
__global__ void whole(float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    y[i] = 2.0f;
}
__global__ void half(float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    y[i] = 1.0f +
}
"""
    a = analyze_cuda(src, "b.cu")
    assert not a.parse_ok and a.syntax_errors
    # The half-typed statement costs that statement only: no finding is made from it, and
    # the rest of `half` is analysed.
    assert [(f.code, f.range.start.line) for f in a.findings] == [("STC001", 2), ("parse", 6)]
    half = next(k for k in a.kernels if k.name == "half")
    assert half.parse_ok
    (note,) = [f for f in a.findings if f.code == "parse"]
    assert note.severity.name == "HINT"
    assert note.message.startswith("Static rules skipped `y[i] = 1.0f +` (one line) in kernel `half`")
    assert "may well be valid" in note.message


def test_unclosed_function_is_skipped_whole_with_a_hint():
    src = """__global__ void half(float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    y[i] = 1.0f;
"""
    a = analyze_cuda(src, "c.cu")
    half = next(k for k in a.kernels if k.name == "half")
    assert not half.parse_ok
    (note,) = [f for f in a.findings if f.code == "parse"]
    assert note.range == half.name_range
    assert note.message.startswith("Static rules skipped kernel `half`: tree-sitter's CUDA grammar cannot read it")
    assert "may well be valid" in note.message


def test_half_typed_code_never_raises():
    text = SOURCE
    analyzer = CudaAnalyzer("typing.cu")
    for cut in range(0, len(text), 7):
        analyzer.analyze(text[:cut])
    for cut in range(0, len(text), 11):
        analyzer.analyze(text[:cut] + text[cut + 5:])
    assert analyzer.analyze(text).parse_ok


def test_incremental_results_match_a_fresh_analysis():
    analyzer = CudaAnalyzer("inc.cu")
    analyzer.analyze(SOURCE)
    edited = SOURCE.replace("void run(", "\n\n// moved\nvoid run(").replace("if (i >= n) return;", "")
    incremental = analyzer.analyze(edited)
    fresh = CudaAnalyzer("inc.cu").analyze(edited)
    assert incremental == fresh
    assert any(f.code == "STC001" for f in fresh.findings)


def test_queries_are_found_in_the_checkout_and_in_the_package_layout():
    from pathlib import Path

    from stitch_lsp.analysis import cuda_grammar

    repo = Path(__file__).resolve().parents[2]
    assert cuda_grammar.grammar_path("cuda_facts.scm") == repo / "grammars" / "cuda_facts.scm"
    # The package carries the same folder (a symlink here, copied files in a wheel).
    packaged = repo / "stitch_lsp" / "analysis" / "grammars"
    assert (packaged / "cuda_facts.scm").read_text() == (repo / "grammars" / "cuda_facts.scm").read_text()


def test_warm_up_and_forget():
    from stitch_lsp.analysis.cuda_analysis import analyzer_for, forget, warm_up

    warm_up()
    first = analyzer_for("doc.cu")
    assert analyzer_for("doc.cu") is first
    forget("doc.cu")
    assert analyzer_for("doc.cu") is not first


def test_code_under_if_zero_is_not_analysed():
    src = (
        "#if 0\n__global__ void dead(float* y) { y[blockIdx.x * blockDim.x + threadIdx.x] = 1; }\n"
        "#else\n__global__ void live(float* y) { y[blockIdx.x * blockDim.x + threadIdx.x] = 1; }\n#endif\n"
    )
    a = analyze_cuda(src, "if0.cu")
    assert [k.name for k in a.kernels] == ["live"]
    assert [f.range.start.line for f in a.findings] == [3]


def test_file_rules_ignore_launches_in_functions_that_do_not_parse():
    src = (
        "__global__ void wide(float* __restrict__ y) { y[threadIdx.x] = 0.0f; }\n"
        "void run(float* y) {\n  wide<<<1, 1024>>>(y);\n  cudaGetLastError();\n  int x = ;\n}\n"
    )
    a = analyze_cuda(src, "broken_host.cu")
    # The unreadable statement costs itself only: the launch before it is still seen.
    assert not a.parse_ok and [l.kernel for l in a.launches] == ["wide"]
    assert [f.code for f in a.findings] == ["STC014", "parse"]
    assert "`int x = ;`" in a.findings[1].message
    unclosed = analyze_cuda(src.rstrip("}\n") + "\n", "broken_host2.cu")
    assert unclosed.launches == ()  # a body that never closes: nothing is built from it
    assert [f.code for f in unclosed.findings] == []
    fixed = analyze_cuda(src.replace("int x = ;", ""), "broken_host.cu")
    assert [f.code for f in fixed.findings] == ["STC014"]


def test_findings_come_in_document_order():
    from pathlib import Path

    text = (Path(__file__).parent / "fixtures" / "stc014.cu").read_text() + "\n" + \
        (Path(__file__).parent / "fixtures" / "stc001.cu").read_text()
    a = analyze_cuda(text, "order.cu")
    starts = [(f.range.start.line, f.range.start.character) for f in a.findings]
    assert starts == sorted(starts) and {f.code for f in a.findings} == {"STC001", "STC014"}


def test_qualifier_orders_prototypes_and_namespaces():
    src = """\
namespace ops {
void __global__ late_global(float* y) { y[0] = 1.0f; }
__global__ __launch_bounds__(128) void bounds_first(float* y) { y[0] = 2.0f; }
static __global__ void declared_only(float* y);
__global__ void defined_later(float* y);
__global__ void defined_later(float* y) { y[0] = 3.0f; }
extern "C" {
__global__ void in_c_block(float* __restrict__ const p) { p[0] = 4.0f; }
}
}
"""
    a = analyze_cuda(src, "orders.cu")
    assert a.parse_ok
    names = [k.name for k in a.kernels]
    assert names == ["late_global", "bounds_first", "declared_only", "defined_later", "in_c_block"]
    k = {k.name: k for k in a.kernels}
    assert k["bounds_first"].launch_bounds == "128"
    assert k["declared_only"].body_range is None and k["defined_later"].body_range is not None
    (p,) = k["in_c_block"].params
    assert (p.is_pointer, p.is_const, p.is_restrict) == (True, False, True)  # the pointer is const, not the data
