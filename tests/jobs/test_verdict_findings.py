"""Where a verdict's problems land in the .cu file: the place a user fixes them."""

from __future__ import annotations

from stitch_lsp.findings import Range, Severity
from stitch_lsp.lsp.features.kernel_checks import verdict_findings
from stitch_lsp.verdict import HackFlag, RubricScore, Sanitizer, SanitizerFinding, Verdict, VerdictStatus
from tests.jobs.test_pairing import pair

CU = """
    // stitch: reference=ref/softmax_ref.py
    __global__ void relu_kernel(const float* x, float* y, int n) {
        int i = blockIdx.x * blockDim.x + threadIdx.x;
        y[i] = x[i];
    }
"""


def test_reference_that_fails_to_import_is_reported_at_the_pairing_comment(tmp_path):
    p = pair(tmp_path, CU).pairs[0]
    lines = (tmp_path / "softmax.cu").read_text().splitlines()
    v = Verdict(status=VerdictStatus.BAD_INPUT, summary="the reference raised ModuleNotFoundError: No module named 'mylib'")
    [f] = verdict_findings("softmax.cu", p, v, lines)
    assert f.range.start.line == 0 and f.severity is Severity.ERROR and "mylib" in f.message


def test_sanitizer_at_its_line_hack_flags_and_weak_rubric_at_the_kernel(tmp_path):
    p = pair(tmp_path, CU).pairs[0]
    lines = (tmp_path / "softmax.cu").read_text().splitlines()
    v = Verdict(
        status=VerdictStatus.HACKING,
        summary="hacking",
        sanitizer=Sanitizer(status="findings", findings=[
            SanitizerFinding("memcheck", "Invalid __global__ write of size 4", "address out of bounds", file="/x/softmax.cu", line=3),
            SanitizerFinding("racecheck", "Race reported", "between write and read", file="other.cu", line=1),
        ]),
        hack_flags=[HackFlag("HACK004", "creates streams", evidence="cudaStreamCreate(&s)")],
        rubric=[RubricScore("cuda_engineering", 2, ["no bounds check"]), RubricScore("operator_coverage", 5)],
    )
    found = verdict_findings("softmax.cu", p, v, lines)
    by_code = {f.code: f for f in found}
    assert by_code["sanitizer-memcheck"].range == Range.line_span(3, 0, len(lines[3]))
    assert by_code["sanitizer-racecheck"].range == p.kernel_range  # another file's line: at the kernel
    assert by_code["HACK004"].range == p.kernel_range and by_code["HACK004"].related == ("cudaStreamCreate(&s)",)
    assert "rubric-cuda_engineering" in by_code and "rubric-operator_coverage" not in by_code
    assert by_code["rubric-cuda_engineering"].related == ("no bounds check",)


def test_compile_errors_land_at_their_line_in_the_cu_file(tmp_path):
    from stitch_lsp.findings import Finding
    from stitch_lsp.verdict import CompileResult

    p = pair(tmp_path, CU).pairs[0]
    lines = (tmp_path / "softmax.cu").read_text().splitlines()
    err = Finding("/work/.stitch/work/abc/softmax.cu", Range.of(3, 4, 3, 20), Severity.ERROR, "nvrtc", 'identifier "q" is undefined')
    v = Verdict(status=VerdictStatus.COMPILE_ERROR, summary="compile error", compile=CompileResult(ok=False, diagnostics=[err]))
    [f] = verdict_findings("softmax.cu", p, v, lines)
    assert f.range == err.range and 'identifier "q"' in f.message
    other = Finding("candidate.py", Range.of(40, 0, 40, 1), Severity.ERROR, "py", "NameError")
    v.compile.diagnostics = [other]
    [f] = verdict_findings("softmax.cu", p, v, lines)
    assert f.range == p.kernel_range and "NameError" in f.message
