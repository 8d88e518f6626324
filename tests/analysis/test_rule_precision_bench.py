"""bench/rule_precision.py: counts per rule over a folder, and precision from a reviewed sample."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_counts_and_review(tmp_path):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "k.cu").write_text(
        "__global__ void k(const float* __restrict__ x, float* __restrict__ y, int len) {\n"
        "  int id = blockIdx.x * blockDim.x + threadIdx.x;\n"
        "  if (id > len) return;\n"
        "  y[id] = x[id];\n"
        "}\n"
        "__global__ void half(float* y, int n) {\n"
        "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n")
    review = tmp_path / "review.md"
    review.write_text("| rule | where | ok | verdict |\n|---|---|---|---|\n"
                      "| STC019 | corpus/k.cu:3 | yes | off by one |\n"
                      "| STC001 | corpus/k.cu:9 | no | no longer fires |\n")
    out = subprocess.run([sys.executable, str(REPO / "bench" / "rule_precision.py"), str(corpus),
                          "--out", str(tmp_path / "r.json"), "--list", str(tmp_path / "l.txt"), "--review", str(review)],
                         capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    data = json.loads((tmp_path / "r.json").read_text())
    assert data["files"] == 1 and data["kernels"] == 2 and data["crashes"] == []
    assert data["kernels_skipped"] == 1 and data["kernels_skipped_without_hint"] == 0
    assert data["rules"]["STC019"]["findings"] == 1
    assert data["review"]["STC019"] == {"reviewed": 1, "worth_acting_on": 1, "hints_reviewed": 0, "stale": []}
    assert data["review"]["STC001"]["stale"] == ["corpus/k.cu:9"]
    assert "corpus/k.cu:3: warning STC019" in (tmp_path / "l.txt").read_text()
    assert "STC019   warning         1" in out.stderr
