"""``stitch verify-kernel``: the editor's on-save check, headless (CPU stand-in Verifier)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.jobs.test_kernel_checks_e2e import CU, STAND_IN, workspace

REPO = Path(__file__).resolve().parents[2]


def stitch(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    env = {"PYTHONPATH": str(REPO), "STITCH_TEST_VERIFIER": STAND_IN, "PATH": "/usr/bin:/bin"}
    return subprocess.run([sys.executable, "-m", "stitch_lsp.cli", "verify-kernel", *args],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)


def test_verifies_then_answers_from_the_cache_and_writes_a_report(tmp_path):
    workspace(tmp_path)
    (tmp_path / "pyproject.toml").write_text("")
    first = stitch(tmp_path, "gelu.cu", "--report")
    assert first.returncode == 0, first.stderr
    assert "gelu.cu:4: fused_gelu_scale: ✓ correct (6/6 checks) · 2.31× eager · 1.05× torch.compile" in first.stdout
    assert "(cached)" not in first.stdout and "[timing]" in first.stderr
    [report] = (tmp_path / ".stitch" / "reports").glob("fused_gelu_scale-*.md")
    assert "## Correctness" in report.read_text()
    again = stitch(tmp_path, "gelu.cu:fused_gelu_scale", "--json")
    assert again.returncode == 0
    [entry] = json.loads(again.stdout)
    assert entry["kernel"] == "fused_gelu_scale" and entry["cached"] is True
    assert entry["verdict"]["timing"]["speedup_vs_eager"] == 2.31


def test_bad_pairing_and_unknown_kernel_exit_2_with_the_reason(tmp_path):
    workspace(tmp_path, CU.replace("reference=", "refrence="))
    out = stitch(tmp_path, "gelu.cu")
    assert out.returncode == 2
    assert "gelu.cu:3:12: error: unknown pairing key `refrence`; did you mean `reference`?" in out.stderr
    workspace(tmp_path)
    out = stitch(tmp_path, "gelu.cu:no_such_kernel")
    assert out.returncode == 2 and "`no_such_kernel` is not a paired kernel" in out.stderr
    assert stitch(tmp_path, "missing.cu").returncode == 2


def test_a_wrong_kernel_exits_1(tmp_path):
    workspace(tmp_path, CU.replace("    if (i < n) out[i]", "    if (i < n) out[i] /* STITCH_TEST_WRONG */"))
    out = stitch(tmp_path, "gelu.cu")
    assert out.returncode == 1 and "✗ 1/7 checks failed" in out.stdout
