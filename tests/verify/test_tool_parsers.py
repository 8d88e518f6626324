"""Parsers for real ncu / compute-sanitizer outputs captured on the H100 (no GPU needed)."""

from __future__ import annotations

from pathlib import Path

from stitch_lsp.verify.ncu_report import parse_details_csv
from stitch_lsp.verify.sanitizer_report import error_count, map_to_candidate, parse_sanitizer

FIX = Path(__file__).resolve().parents[1] / "fixtures"


def test_ncu_details_csv_gives_a_structured_profile():
    (k,) = parse_details_csv((FIX / "h100" / "ncu_details.csv").read_text())
    assert k.name == "fused_gelu_scale"
    assert k.duration_us == 64.064
    assert k.sm_throughput_pct == 52.75 and k.memory_throughput_pct == 55.15 and k.dram_throughput_pct == 55.15
    assert round(k.dram_bandwidth_gbs) == 1848
    assert k.achieved_occupancy_pct == 73.91 and k.theoretical_occupancy_pct == 100.0
    assert k.registers == 16 and k.grid == "(65536, 1, 1)" and k.block == "(256, 1, 1)"
    assert k.bound == "latency"  # both under 60 % of peak: Nsight's own SOLBottleneck reading
    assert 15 < k.ridge_point < 17  # H100 FP32 peak / DRAM peak, from the roofline section
    assert k.flops and k.arithmetic_intensity and k.arithmetic_intensity < k.ridge_point
    rules = {r.name: r for r in k.rules}
    assert set(rules) == {"SOLBottleneck", "SOLFPRoofline", "AchievedOccupancy"}
    assert rules["AchievedOccupancy"].estimated_speedup_pct == 26.09 and rules["AchievedOccupancy"].rule_type == "OPT"
    assert "latency issues" in rules["SOLBottleneck"].message


def test_ncu_output_without_a_table_gives_no_kernels():
    assert parse_details_csv("==PROF== Connected to process 1\n==PROF== Disconnected\n") == []


def test_racecheck_summary_format():
    text = (FIX / "h100" / "sanitizer_racecheck.txt").read_text()
    (f,) = parse_sanitizer(text, "racecheck")
    assert f.kernel == "race_kernel" and f.file == "kernels.cu" and f.line == 14
    assert f.kind == "race (write / read)" and "1024 hazards" in f.message
    assert error_count(text) == 1


def test_memcheck_clean_output_has_no_findings():
    text = (FIX / "h100" / "sanitizer_memcheck.txt").read_text()
    assert parse_sanitizer(text, "memcheck") == [] and error_count(text) == 0


def test_memcheck_out_of_bounds_maps_to_the_candidate_line():
    text = (FIX / "h100_verify" / "memcheck_off_by_one.txt").read_text()
    findings = parse_sanitizer(text, "memcheck")
    assert len(findings) == 1  # the launch failures that follow the fault are its echo
    f = findings[0]
    assert f.kind == "Invalid __global__ read" and f.kernel == "relu_scale" and f.line == 10
    assert "1 bytes after the nearest allocation" in f.message
    map_to_candidate(f, ["/work/job/candidate.py", "/work/job/k.cu"])
    assert f.file == "/work/job/candidate.py"


def test_racecheck_hazard_format_is_deduplicated():
    text = (FIX / "h100_verify" / "racecheck_hazards_head.txt").read_text()
    findings = parse_sanitizer(text, "racecheck")
    assert len(findings) == 1
    f = findings[0]
    assert f.kind == "WAR hazard on __shared__" and f.kernel == "rowsum" and f.file == "rowsum.cu" and f.line == 10


def test_ncu_from_the_verifier_own_profile_run():
    # NVTX-filtered runs (an extra column in the table): one candidate kernel, two eager kernels.
    (cand,) = parse_details_csv((FIX / "h100_verify" / "ncu_candidate_relu_scale.txt").read_text(), "candidate")
    assert cand.name == "relu_scale" and cand.role == "candidate" and cand.duration_us == 5.696
    assert cand.grid == "(4096, 1, 1)" and cand.registers == 16 and cand.dram_bytes > 4e6
    ref = parse_details_csv((FIX / "h100_verify" / "ncu_reference_relu_scale.txt").read_text(), "reference")
    assert len(ref) == 2 and all(k.role == "reference" and k.duration_us for k in ref)
    assert "launch_clamp_scalar" in ref[0].name  # relu, then the multiply


def test_real_nvrtc_log_maps_to_the_candidate_line():
    from stitch_lsp.runtime.loader import parse_nvrtc_log
    from stitch_lsp.worker.modules import compile_failure

    log = (FIX / "h100_verify" / "nvrtc_compile_error.txt").read_text()
    text, diags = parse_nvrtc_log(log, "candidate.py")
    assert [(d.line, d.severity) for d in diags] == [(11, "error")]

    class FakeError(Exception):  # what load_kernel raises, without needing a GPU
        pass

    candidate = Path(__file__).resolve().parent / "corpus" / "gpu" / "compile_error.py"
    source = candidate.read_text().split("r'''")[1].split("'''")[0]  # the SOURCE string it compiles
    exc = FakeError("kernel failed to compile")
    exc.log, exc.diagnostics, exc.source, exc.first_line = text, diags, source, 7
    FakeError.__name__ = "KernelCompileError"
    failure = compile_failure(exc, {str(candidate): candidate.read_text()}, str(candidate))
    (finding,) = failure.diagnostics
    assert finding.path == str(candidate) and finding.range.start.line == 10
    assert "undefined_name" in finding.message and failure.backend == "nvrtc"
