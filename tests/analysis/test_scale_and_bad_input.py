"""Large files, edits, and input that is not well-formed CUDA (or not text at all)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from stitch_lsp.analysis import cuda_analysis
from stitch_lsp.analysis.cuda_analysis import CudaAnalyzer, analyze_cuda, forget
from stitch_lsp.analysis.cuda_text import encode_source
from stitch_lsp.analysis.cuda_preproc import preprocess

FIXTURES = Path(__file__).parent / "fixtures"


def big_file(copies: int) -> str:
    good = (FIXTURES / "good_kernels.cu").read_text()
    bad = (FIXTURES / "stc001.cu").read_text()
    parts = []
    for i in range(copies):
        parts.append(good.replace("void ", f"void c{i}_").replace("#define CUDA_CHECK", f"#define CUDA_CHECK_{i}"))
        parts.append(bad.replace("void ", f"void d{i}_"))
    return "\n".join(parts)


@pytest.fixture()
def count_function_passes(monkeypatch):
    calls = []
    real = cuda_analysis._analyze_unit

    def counting(src, cols, consts, u, path, *rest):
        calls.append(u.unit.start_point.row)
        return real(src, cols, consts, u, path, *rest)

    monkeypatch.setattr(cuda_analysis, "_analyze_unit", counting)
    return calls


def test_an_edit_reanalyses_only_the_function_it_touched(count_function_passes):
    text = big_file(40)  # ~8,000 lines
    assert text.count("\n") > 7000
    analyzer = CudaAnalyzer("big.cu")
    first = analyzer.analyze(text)
    n_functions = len(count_function_passes)
    assert n_functions > 400 and len(first.kernels) > 400
    count_function_passes.clear()

    at = text.index("acc += As[ty][k] * Bs[k][tx];", len(text) // 2)
    edited = text[:at] + "acc += 0.0f; " + text[at:]
    second = analyzer.analyze(edited)
    assert len(count_function_passes) == 1
    assert second == CudaAnalyzer("big.cu").analyze(edited)

    count_function_passes.clear()
    moved = "// a new first line\n" + edited
    third = analyzer.analyze(moved)
    assert count_function_passes == []  # everything moved down a line, nothing re-analysed
    assert [f.range.start.line for f in third.findings] == [f.range.start.line + 1 for f in second.findings]
    assert third == CudaAnalyzer("big.cu").analyze(moved)


def test_typing_a_kernel_character_by_character_never_raises():
    text = (FIXTURES / "stc003.cu").read_text() + (FIXTURES / "good_kernels.cu").read_text()[:3000]
    analyzer = CudaAnalyzer("typing.cu")
    for end in range(0, len(text), 3):
        a = analyzer.analyze(text[:end])
        if not a.parse_ok:
            assert a.syntax_errors
    final = analyzer.analyze(text)
    assert final == CudaAnalyzer("typing.cu").analyze(text)


def test_random_deletions_never_raise_and_broken_functions_report_nothing():
    text = (FIXTURES / "stc001.cu").read_text()
    rng = random.Random(7)
    analyzer = CudaAnalyzer("fuzz.cu")
    for _ in range(150):
        a, b = sorted(rng.randrange(len(text)) for _ in range(2))
        broken = text[:a] + text[b:b + rng.randrange(5)] + text[b:]
        result = analyzer.analyze(broken)
        for k in (*result.kernels, *result.device_functions):
            if not k.parse_ok:
                # Nothing but the hint that says the rules skipped it.
                inside = [f for f in result.findings if k.range.contains(f.range.start)]
                assert [(f.code, f.range) for f in inside] in ([], [("parse", k.name_range)])


@pytest.mark.parametrize("text", [
    "",
    "\x00\x01\x02binary\x00" * 100,
    "__global__ void k(float* y) { y[0] = '\udcff'; }",  # a lone surrogate from a bad decode
    "}}}}{{{{ <<<>>> __global__ __global__",
    "__global__ void k(float* y) {" * 300,
    "#define X(\n#if\n__global__",
    "\ufeff__global__ void k(float* y) { y[blockIdx.x * blockDim.x + threadIdx.x] = 1; }",
    "__global__ void k(float* y, int n) { int i = threadIdx.x" + " + i" * 3000 + "; y[" + "(" * 3000 + "i"
    + ")" * 3000 + "] = 1; }",
    "__global__ void k(float* y) {" + "if (threadIdx.x) {" * 2000 + "__syncthreads();" + "}" * 2001,
])
def test_garbage_input_gives_an_answer(text):
    result = analyze_cuda(text, "garbage.cu")
    assert isinstance(result.findings, tuple)
    forget("garbage.cu")


def test_bom_and_wide_characters_keep_columns_in_code_points():
    text = "\ufeff__global__ void k(float* y) { /* 日本語 */ y[blockIdx.x * blockDim.x + threadIdx.x] = 1; }"
    (f,) = analyze_cuda(text, "bom.cu").findings
    col = text.index("y[blockIdx")
    assert (f.range.start.character, f.range.end.character) == (col, text.index(" = 1"))


def test_incremental_analysis_always_equals_a_fresh_one():
    """Random edits (typing, deleting lines, pasting, breaking and fixing syntax): the
    analyser that reuses the previous version must answer exactly like one that starts
    from nothing."""
    base = "\n".join((FIXTURES / name).read_text() for name in ("stc003.cu", "stc004.cu", "good_kernels.cu"))
    base = "namespace outer {\n#define LOCAL_BLOCK 64\n" + base + "\n}\n"
    rng = random.Random(11)
    snippets = ["x", "\n", "}", "{", "  ", "// c\n", "#define BLOCK 512\n", "__syncthreads();", "y[i] = 0;",
                "/*", "*/", "\"", "int q = threadIdx.x;\n", "#if 0\n", "#else\n", "#endif\n"]
    analyzer = CudaAnalyzer("same.cu")
    text = base
    for step in range(60):
        roll = rng.random()
        at = rng.randrange(len(text) + 1)
        if roll < 0.45:
            text = text[:at] + rng.choice(snippets) + text[at:]
        elif roll < 0.8:
            text = text[:at] + text[at + rng.randrange(1, 40):]
        elif roll < 0.9:
            text = base  # back to a clean file
        else:
            lines = text.split("\n")
            k = rng.randrange(len(lines))
            text = "\n".join(lines[:k] + lines[k + 1:] + [lines[k]])  # move a line to the end
        incremental = analyzer.analyze(text)
        # The same tree analysed from nothing (no reused records or cached functions).
        src = encode_source(text)
        whole = CudaAnalyzer("same.cu")._analyze_tree(preprocess(src), src, analyzer._tree, None)
        assert incremental == whole, f"step {step}"
        if incremental.parse_ok:
            # tree-sitter's error recovery may differ between an incremental and a fresh parse,
            # but a file that parses gives the same tree either way.
            assert incremental == CudaAnalyzer("same.cu").analyze(text), f"step {step}"


def test_crlf_line_endings_give_the_same_positions():
    text = (FIXTURES / "stc001.cu").read_text()
    lf = CudaAnalyzer("lf.cu").analyze(text)
    crlf = CudaAnalyzer("lf.cu").analyze(text.replace("\n", "\r\n"))
    assert [(f.code, f.range) for f in crlf.findings] == [(f.code, f.range) for f in lf.findings]
    assert len(crlf.suppressed) == len(lf.suppressed) == 2


def test_an_unclosed_brace_does_not_make_every_keystroke_analyse_the_rest_of_the_file(monkeypatch):
    text = big_file(20)
    analyzer = CudaAnalyzer("brace.cu")
    analyzer.analyze(text)
    bodies = []
    real = cuda_analysis.build_facts
    monkeypatch.setattr(cuda_analysis, "build_facts", lambda *a: bodies.append(a[3]) or real(*a))
    typed = "__global__ void fresh(float* y) {\n  y[0] = 1"
    for end in range(1, len(typed) + 1):
        result = analyzer.analyze(typed[:end] + "\n" + text)
        assert isinstance(result.findings, tuple)
    # Whatever the parser made of the unclosed brace, bodies it swallowed are never analysed.
    assert sum(b.end_byte - b.start_byte for b in bodies) < len(text)
    assert analyzer.analyze(text) == CudaAnalyzer("brace.cu").analyze(text)


def _giant_kernel(blocks: int) -> str:
    body = []
    for i in range(blocks):
        body.append(f"  int v{i} = blockIdx.x * blockDim.x + threadIdx.x + {i};")
        body.append(f"  for (int k{i} = 0; k{i} < n; ++k{i}) {{ s[threadIdx.x] = x[v{i}]; __syncthreads(); "
                    f"acc += s[(threadIdx.x + {i}) % 256]; if (v{i} < n) y[v{i}] = acc; atomicAdd(&y[0], acc); }}")
    return ("__global__ void giant(const float* __restrict__ x, float* y, int n) {\n"
            "  __shared__ float s[256];\n  float acc = 0.0f;\n" + "\n".join(body) + "\n}\n")


def test_one_huge_function_is_analysed_in_linear_work(monkeypatch):
    """Work counted, not timed: doubling a generated kernel must not quadruple the checks
    of 'which conditions govern this byte' (a scan per access would)."""
    from stitch_lsp.analysis.cuda_facts import Control

    calls = [0]
    real = Control.governs

    def counting(self, byte):
        calls[0] += 1
        return real(self, byte)

    monkeypatch.setattr(Control, "governs", counting)
    work = []
    for blocks in (200, 400):
        calls[0] = 0
        a = CudaAnalyzer(f"giant{blocks}.cu").analyze(_giant_kernel(blocks))
        assert {f.code for f in a.findings} >= {"STC006", "STC017"}
        work.append(calls[0])
    assert work[1] < 2.6 * work[0], work
