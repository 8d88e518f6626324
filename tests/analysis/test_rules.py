"""Each rule fires exactly where a fixture marks it, and nowhere else (data-driven)."""

from __future__ import annotations

from pathlib import Path

import pytest

from stitch_lsp.analysis.cuda_analysis import CudaAnalyzer
from stitch_lsp.analysis.rules import ALL_RULES
from stitch_lsp.findings import Severity

from .markers import actual_findings, expected_findings

FIXTURES = Path(__file__).parent / "fixtures"
RULE_FIXTURES = sorted(FIXTURES.glob("stc*.cu"))


def analyse(path: Path):
    return CudaAnalyzer(str(path)).analyze(path.read_text(encoding="utf-8"))


@pytest.mark.parametrize("fixture", RULE_FIXTURES, ids=lambda p: p.stem)
def test_rule_fixture_fires_exactly_at_markers(fixture: Path):
    text = fixture.read_text(encoding="utf-8")
    analysis = analyse(fixture)
    assert analysis.parse_ok, analysis.syntax_errors
    expected = expected_findings(text)
    assert expected, "a rule fixture must plant at least one violation"
    assert actual_findings(analysis.findings) == expected


def test_every_rule_has_a_fixture():
    assert {r.meta.code.lower() for r in ALL_RULES} == {p.stem for p in RULE_FIXTURES}


@pytest.mark.parametrize("fixture", sorted(FIXTURES.glob("good_*.cu")), ids=lambda p: p.stem)
def test_good_kernels_are_quiet(fixture: Path):
    analysis = analyse(fixture)
    assert analysis.parse_ok and len(analysis.kernels) >= 8
    assert [(f.code, f.range.start.line + 1, f.message) for f in analysis.findings] == []


def test_ignore_comments_silence_only_what_they_name():
    analysis = analyse(FIXTURES / "stc001.cu")
    silenced = {(f.code, f.range.start.line) for f in analysis.suppressed}
    assert silenced == {("STC001", 30), ("STC001", 31)}


def test_codes_are_unique_and_documented():
    codes = [r.meta.code for r in ALL_RULES]
    assert len(codes) == len(set(codes)) >= 12
    docs = Path(__file__).resolve().parents[2] / "docs" / "rules"
    for rule in ALL_RULES:
        assert (docs / f"{rule.meta.code}.md").is_file(), rule.meta.code
        assert isinstance(rule.meta.severity, Severity)


def test_ignore_file_and_ignore_edit():
    from stitch_lsp.analysis.cuda_suppress import ignore_edit

    text = (FIXTURES / "stc008.cu").read_text()
    assert {f.code for f in CudaAnalyzer("a.cu").analyze(text).findings} == {"STC008"}
    silenced = CudaAnalyzer("b.cu").analyze("/* stitch: ignore-file STC008 */\n" + text)
    assert silenced.findings == () and len(silenced.suppressed) == 3
    other = CudaAnalyzer("c.cu").analyze("// stitch: ignore-file STC001\n" + text)
    assert len(other.findings) == 3

    (first, *_) = CudaAnalyzer("a.cu").analyze(text).findings
    lines = text.split("\n")
    edit = ignore_edit(first, lines[first.range.start.line])
    assert edit.new_text == "  // stitch: ignore STC008"
    lines[first.range.start.line] += edit.new_text
    after = CudaAnalyzer("a.cu").analyze("\n".join(lines))
    assert first.range.start.line not in {f.range.start.line for f in after.findings}
    merged = ignore_edit(first, "x(); // stitch: ignore STC001")
    assert merged.new_text == " STC008" and merged.range.start.character == len("x(); // stitch: ignore STC001")
