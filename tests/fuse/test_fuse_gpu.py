"""On a GPU: every bench pattern fuses and passes the Verifier; an applied edit runs in a fresh process.

    python -m pytest -q -m gpu tests/fuse/test_fuse_gpu.py          # all bench tasks (long)
    STITCH_FUSE_TASKS='norm_*' python -m pytest -q -m gpu tests/fuse/test_fuse_gpu.py
"""

from __future__ import annotations

import fnmatch
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from stitch_lsp.fuse.service import fuse_task
from stitch_lsp.pipeline import Task
from stitch_lsp.settings import Settings

REPO = Path(__file__).resolve().parents[2]
TASKS = sorted(p for p in (REPO / "bench" / "tasks").glob("*.py") if not p.name.startswith("_"))
SELECTED = [p for p in TASKS if fnmatch.fnmatch(p.stem, os.environ.get("STITCH_FUSE_TASKS", "*"))]
FIXTURE = REPO / "tests" / "fixtures" / "fuse" / "block.py"


@pytest.mark.gpu
@pytest.mark.timeout(900)
@pytest.mark.parametrize("path", SELECTED, ids=[p.stem for p in SELECTED])
def test_bench_task_fuses_and_passes_the_verifier(path, verifier, tmp_path):
    task = Task(name=path.stem, source=path.read_text())
    outcome = fuse_task(task, Settings(), verifier=verifier, workdir=tmp_path)
    assert outcome.candidate is not None, outcome.message
    # A kernel, or a GEMM's activation folded into cuBLASLt's epilogue (then there is no kernel to write).
    assert outcome.candidate.cuda_sources or outcome.candidate.library_fusions, outcome.message
    verdict = outcome.verdict
    assert verdict is not None
    failed = [f"{t.name}: {t.detail}" for t in verdict.correctness.failed_trials]
    assert verdict.status.value == "correct", (verdict.summary, failed, [f.message for f in verdict.hack_flags])
    assert not verdict.hack_flags


@pytest.mark.gpu
@pytest.mark.timeout(900)
def test_applied_edit_runs_in_a_fresh_process(tmp_path):
    """`stitch fuse --apply` rewrites the file; a new process gets the reference's results from it."""
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "pyproject.toml").write_text("[project]\nname = 'ws'\n")
    model = ws / "block.py"
    shutil.copy(FIXTURE, model)
    shutil.copy(FIXTURE, ws / "block_reference.py")
    lines = model.read_text().splitlines()
    start = next(i for i, l in enumerate(lines) if "h = self.norm(x + residual)" in l) + 1
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    run = subprocess.run([sys.executable, "-m", "stitch_lsp.cli", "fuse", f"{model}:{start}-{start + 1}", "--apply"],
                         cwd=ws, env=env, capture_output=True, text=True, timeout=850)
    assert run.returncode == 0, run.stdout + run.stderr
    edited = model.read_text()
    assert "fused_" in edited and "self.norm(x + residual)" not in edited
    assert list((ws / "stitch_kernels").glob("fused_*.py")) and (ws / "stitch_kernels" / "_stitch_loader.py").exists()
    check = """
import torch, block, block_reference
torch.manual_seed(0); a = block.Block().cuda()
torch.manual_seed(0); b = block_reference.Block().cuda()
x, r = (t.cuda() for t in block.get_inputs())
with torch.no_grad():
    out_a, h_a = a(x, r)
    out_b, h_b = b(x, r)
torch.testing.assert_close(h_a, h_b, rtol=1e-4, atol=1e-4)
torch.testing.assert_close(out_a, out_b, rtol=1e-4, atol=1e-4)
print("same results")
"""
    fresh = subprocess.run([sys.executable, "-c", check], cwd=ws, env={k: v for k, v in os.environ.items()
                                                                        if k != "PYTHONPATH"},
                           capture_output=True, text=True, timeout=300)
    assert fresh.returncode == 0 and "same results" in fresh.stdout, fresh.stdout + fresh.stderr
