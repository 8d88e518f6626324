"""`stitch verify` on a GPU: exit codes and the printed sections (run on the GPU machine)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu

REPO = Path(__file__).resolve().parents[2]
CORPUS = Path(__file__).resolve().parent / "corpus" / "gpu"


def stitch_verify(tmp_path, cand, *extra):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-m", "stitch_lsp.cli", "verify", str(CORPUS / "ref_rowsum.py"), str(cand),
                           "--workdir", str(tmp_path), *extra], capture_output=True, text=True, env=env, timeout=280)


def test_cli_text_for_an_honest_kernel_with_a_cu_file(tmp_path):
    proc = stitch_verify(tmp_path, CORPUS / "rowsum_honest" / "candidate.py", "--quiet")
    print(proc.stdout)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for section in ("CORRECT:", "compile: ok via nvrtc", "rowsum:", "correctness: passed", "timing: measured",
                    "torch.compile", "speedup:", "anti-hacking flags: none"):
        assert section in proc.stdout, section
    assert "Traceback" not in proc.stdout + proc.stderr


def test_cli_json_for_a_buggy_kernel(tmp_path):
    proc = stitch_verify(tmp_path, CORPUS / "rowsum_non_multiple" / "candidate.py", "--json", "--no-timing")
    assert proc.returncode == 1
    verdict = json.loads(proc.stdout)
    assert verdict["status"] == "incorrect"
    assert [t["name"] for t in verdict["correctness"]["trials"] if not t["passed"]] == ["odd-shape"]
