"""The bundled examples, and quick fixes that really fix what they claim to."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from stitch_lsp.analysis.cuda_analysis import CudaAnalyzer
from stitch_lsp.findings import Finding, Severity, TextEdit

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "stitch_lsp" / "examples"
FIXTURES = Path(__file__).parent / "fixtures"
DOCS = REPO / "docs" / "rules"


def analyse(text: str, name: str = "x.cu"):
    return CudaAnalyzer(name).analyze(text)


def apply_edits(text: str, edits: tuple[TextEdit, ...]) -> str:
    lines = text.split("\n")

    def offset(pos) -> int:
        return sum(len(l) + 1 for l in lines[:pos.line]) + pos.character

    for e in sorted(edits, key=lambda e: (e.range.start, e.range.end), reverse=True):
        a, b = offset(e.range.start), offset(e.range.end)
        text = text[:a] + e.new_text + text[b:]
    return text


def test_softmax_example_is_quiet():
    a = analyse((EXAMPLES / "softmax.cu").read_text(), "softmax.cu")
    assert a.parse_ok and [k.name for k in a.kernels] == ["softmax_rows"]
    assert [(f.code, f.range.start.line + 1, f.message) for f in a.findings] == []


def test_buggy_example_shows_its_planted_problems():
    a = analyse((EXAMPLES / "buggy.cu").read_text(), "buggy.cu")
    codes = sorted(f.code for f in a.findings)
    assert codes == ["STC001", "STC001", "STC002", "STC003", "STC004", "STC005", "STC006", "STC008",
                     "STC009", "STC010", "STC015", "STC016"]
    # It compiles (test_examples_and_good_kernels_compile), so no static finding may be an error.
    assert not [f for f in a.findings if f.severity == Severity.ERROR]


def _fixable(path: Path) -> list[tuple[str, Finding]]:
    text = path.read_text()
    return [(text, f) for f in analyse(text, path.name).findings if f.fix is not None]


FIXABLE = [(p.stem, text, f) for p in sorted(FIXTURES.glob("stc*.cu")) + [EXAMPLES / "buggy.cu"]
           for text, f in _fixable(p)]


@pytest.mark.parametrize("name,text,finding", FIXABLE,
                         ids=[f"{n}:{f.code}@{f.range.start.line + 1}" for n, _, f in FIXABLE])
def test_quick_fix_removes_its_finding_and_keeps_the_file_parsing(name, text, finding):
    def on_its_line(findings):
        return [f for f in findings if f.code == finding.code and f.range.start.line == finding.range.start.line]

    before = on_its_line(analyse(text, name).findings)
    after = analyse(apply_edits(text, finding.fix.edits), name)
    assert after.parse_ok
    assert len(on_its_line(after.findings)) == len(before) - 1, f"{finding.fix.title} did not fix it"


def test_every_fixable_rule_has_a_fix_exercised():
    assert {f.code for _, _, f in FIXABLE} >= {"STC007", "STC008", "STC009", "STC011", "STC014", "STC015", "STC016"}


def test_const_fix_text():
    text = "__global__ void k(float *x, int* y, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] = x[i]; }"
    (f,) = [f for f in analyse(text).findings if f.code == "STC008"]
    assert "const float * __restrict__ x" in apply_edits(text, f.fix.edits)
    assert f.fix.title == "Declare `x` as `const float * __restrict__ x`"
    # An output of the same type may be the same buffer (an in-place launch): const only.
    same = text.replace("int* y", "float* y")
    (f,) = [f for f in analyse(same).findings if f.code == "STC008"]
    assert "const float *x" in apply_edits(same, f.fix.edits) and "__restrict__" not in apply_edits(same, f.fix.edits)
    assert "and `__restrict__` if it never overlaps `y`" in f.message


def _nvcc_compiles(source: str, tmp_path: Path) -> subprocess.CompletedProcess:
    src = tmp_path / "k.cu"
    src.write_text(source)
    return subprocess.run(["nvcc", "-c", "-arch=sm_90", "-std=c++17", str(src), "-o", str(tmp_path / "k.o")],
                          capture_output=True, text=True, timeout=240)


@pytest.mark.nvcc
@pytest.mark.parametrize("path", [EXAMPLES / "softmax.cu", EXAMPLES / "buggy.cu", *sorted(FIXTURES.glob("good_*.cu"))],
                         ids=lambda p: p.name)
def test_examples_and_good_kernels_compile(path, tmp_path):
    out = _nvcc_compiles(path.read_text(), tmp_path)
    assert out.returncode == 0, out.stderr


@pytest.mark.nvcc
def test_docs_good_examples_and_fixed_buggy_example_compile(tmp_path):
    import re
    blocks = []
    for page in sorted(DOCS.glob("STC*.md")):
        m = re.search(r"^## Good\n\n```cuda\n(.*?)\n```", page.read_text(), re.S | re.M)
        # Each block in its own namespace, so their names do not clash.
        blocks.append(f"namespace {page.stem.lower()} {{\n{m.group(1)}\n}}\n")
    text = (EXAMPLES / "buggy.cu").read_text()
    # Every quick fix at once, as "fix all" would: each edit in the original coordinates.
    text = apply_edits(text, tuple(e for f in analyse(text).findings if f.fix is not None for e in f.fix.edits))
    source = "#include <cuda_runtime.h>\n#include <cstdio>\n#include <cstdint>\n" + "".join(blocks) + \
        "namespace fixed_buggy {\n" + text + "\n}\n"
    out = _nvcc_compiles(source, tmp_path)
    assert out.returncode == 0, out.stderr
