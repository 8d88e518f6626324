"""`stitch verify` end to end in CPU test mode (no GPU): verdicts and exit codes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CORPUS = Path(__file__).resolve().parent / "corpus" / "cpu"


def verify(tmp_path, ref, cand, *extra):
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run(
        [sys.executable, "-m", "stitch_lsp.cli", "verify", str(ref), str(cand), "--device", "cpu", "--json",
         "--workdir", str(tmp_path / "work"), "--no-timing", *extra],
        capture_output=True, text=True, env=env, timeout=300,
    )
    assert "Traceback" not in proc.stdout
    return proc.returncode, json.loads(proc.stdout)


def test_honest_candidate_passes(tmp_path):
    rc, v = verify(tmp_path, CORPUS / "ref_relu_scale.py", CORPUS / "honest_numpy.py")
    assert v["status"] == "correct", v["summary"]
    assert rc == 0
    kinds = {t["kind"] for t in v["correctness"]["trials"]}
    assert {"random", "adversarial", "shape"} <= kinds
    assert sum(t["kind"] == "random" for t in v["correctness"]["trials"]) >= 5


def test_pytorch_fallback_is_hacking(tmp_path):
    rc, v = verify(tmp_path, CORPUS / "ref_relu_scale.py", CORPUS / "cheat_torch_fallback.py")
    assert rc == 1 and v["status"] == "hacking"
    codes = {(f["code"], f["dynamic"]) for f in v["hack_flags"]}
    assert ("HACK001", True) in codes and ("HACK001", False) in codes


def test_fmax_relu_fails_on_nan_positions(tmp_path):
    rc, v = verify(tmp_path, CORPUS / "ref_relu_scale.py", CORPUS / "bug_fmax_relu.py")
    assert rc == 1 and v["status"] == "incorrect"
    failed = [t for t in v["correctness"]["trials"] if not t["passed"]]
    assert [t["name"] for t in failed] == ["adversarial-nan"]
    assert "NaN" in failed[0]["detail"]


def test_no_modelnew_is_bad_input(tmp_path):
    rc, v = verify(tmp_path, CORPUS / "ref_relu_scale.py", CORPUS / "no_modelnew.py")
    assert rc == 1 and v["status"] == "bad_input"
    assert "ModelNew" in v["summary"]
