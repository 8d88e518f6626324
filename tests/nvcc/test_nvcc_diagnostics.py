"""nvcc's messages (real output in tests/fixtures/nvcc) become Findings at the right place."""

from __future__ import annotations

from pathlib import Path

from stitch_lsp.findings import Severity
from stitch_lsp.verify.nvcc_diagnostics import parse_nvcc_output, source_column, to_findings

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "nvcc"


def findings_for(name: str, source: str | None = None):
    src = FIX / "src" / f"{source or name}.cu"
    log = (FIX / f"{name}.stderr").read_text()
    return to_findings(
        parse_nvcc_output(log),
        compiled_file=str(src),
        display_path="doc.cu",
        source_text=src.read_text(),
        cwd=str(FIX),
    )


def col_of(source: str, line: int, needle: str) -> int:
    return (FIX / "src" / f"{source}.cu").read_text().split("\n")[line].index(needle)


def test_errors_land_on_line_and_column():
    f = findings_for("syntax_error")
    assert [(x.range.start.line, x.severity) for x in f] == [(2, Severity.ERROR), (4, Severity.ERROR)]
    assert f[0].message == 'identifier "undefined_name" is undefined'
    assert f[0].range.start.character == col_of("syntax_error", 2, "undefined_name")
    assert f[0].range.end.character == f[0].range.start.character + len("undefined_name")
    assert f[0].code == "nvcc" and f[0].source == "nvcc"


def test_tabs_unicode_and_long_lines_keep_the_column():
    f = findings_for("columns")
    assert f[0].range.start.line == 3
    assert f[0].range.start.character == col_of("columns", 3, "bogus_tab")
    assert f[1].range.start.character == col_of("columns", 4, "bogus_long")


def test_warnings_keep_their_number_and_skip_the_remark():
    f = findings_for("warnings")
    assert [(x.range.start.line, x.code, x.severity) for x in f] == [
        (2, "nvcc-177-D", Severity.WARNING),
        (8, "nvcc-940-D", Severity.WARNING),
    ]
    assert f[0].range.start.character == col_of("warnings", 2, "never_used")
    assert not any("Remark" in x.message for x in f)


def test_instantiation_context_and_notes_ride_along():
    f = findings_for("template_error")
    assert len(f) == 1 and f[0].range.start.line == 2
    assert any("detected during instantiation" in r for r in f[0].related)
    f = findings_for("overload_error")
    assert len(f) == 1, "notes belong to the error, not separate diagnostics"
    assert "argument types are: (int *)" in f[0].message
    assert f[0].range.start.character == col_of("overload_error", 3, "twice")
    assert len(f[0].related) == 2 and "overload_error.cu:2" in f[0].related[0]


def test_error_in_header_lands_on_the_include_line():
    f = findings_for("include_error")
    assert len(f) == 1
    assert f[0].range.start.line == 0  # the #include "helpers.cuh" line
    assert f[0].message.startswith("In helpers.cuh:3:")


def test_gcc_style_preprocessor_error():
    f = findings_for("missing_include")
    assert len(f) == 1 and f[0].severity is Severity.ERROR
    assert (f[0].range.start.line, f[0].range.start.character) == (0, 9)
    assert "does_not_exist.cuh" in f[0].message


def test_driver_error_on_first_line():
    f = findings_for("bad_arch", source="clean")
    assert len(f) == 1 and f[0].range.start.line == 0
    assert "Unsupported gpu architecture 'sm_1000'" in f[0].message


def test_ptxas_lines_are_not_compiler_messages():
    assert findings_for("clean") == []
    assert findings_for("spill") == []


def test_source_column_fallback_finds_the_token_in_rewritten_echo():
    real = "__device__ float twice(double x) { return 2 * x; }"
    echoed = "__attribute__((device)) float twice(double x) { return 2 * x; }"
    assert source_column(real, echoed, echoed.index("twice")) == real.index("twice")
