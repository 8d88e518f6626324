"""The static race rule points at the same lines compute-sanitizer reported on the H100
for the same source (tests/fixtures/h100, captured from bench/fixtures_src/kernels.cu)."""

from __future__ import annotations

import re
from pathlib import Path

from stitch_lsp.analysis.cuda_analysis import CudaAnalyzer, kernel_at

REPO = Path(__file__).resolve().parents[2]
SOURCE = REPO / "bench" / "fixtures_src" / "kernels.cu"
RACECHECK = REPO / "tests" / "fixtures" / "h100" / "sanitizer_racecheck.txt"
HAZARD = re.compile(r"Race reported between (\w+) access at (\w+)\(.*?\) ?\+0x[0-9a-f]+ in kernels\.cu:(\d+)\s*"
                    r"=+\s+and (\w+) access at \w+\(.*?\) ?\+0x[0-9a-f]+ in kernels\.cu:(\d+)")


def test_static_race_finding_matches_racecheck():
    hazards = HAZARD.findall(RACECHECK.read_text())
    assert hazards, "the captured racecheck output should report the planted race"
    analysis = CudaAnalyzer(str(SOURCE)).analyze(SOURCE.read_text())
    races = [f for f in analysis.findings if f.code == "STC003"]
    for first_kind, kernel, first_line, second_kind, second_line in hazards:
        lines = {first_kind: int(first_line), second_kind: int(second_line)}
        read = [f for f in races if f.range.start.line + 1 == lines["Read"]]
        assert read, f"racecheck saw {kernel} read at line {lines['Read']}; the rule did not"
        assert kernel_at(analysis, read[0].range.start).name == kernel
        # The message names the write racecheck paired it with.
        write_src = SOURCE.read_text().split("\n")[lines["Write"] - 1]
        assert "s[threadIdx.x]" in write_src and "`s[threadIdx.x]`" in read[0].message


def test_planted_out_of_bounds_write_is_flagged_where_memcheck_cannot_see_it():
    # memcheck reported 0 errors (the write stays inside the allocation's rounding);
    # the static rule still points at the unguarded write.
    analysis = CudaAnalyzer(str(SOURCE)).analyze(SOURCE.read_text())
    (oob,) = [f for f in analysis.findings if f.code == "STC001"]
    assert kernel_at(analysis, oob.range.start).name == "oob_kernel"
    assert "0 errors" in (REPO / "tests" / "fixtures" / "h100" / "sanitizer_memcheck.txt").read_text()
