"""``--no-cache`` means measure again, through every layer that could answer instead.

Three layers could answer a repeated question: the workspace's result cache (jobs),
the Verifier's own verdict cache (verify/service.py), and the worker's compiled
torch.compile baseline kept from an earlier job. Each test below fails if its layer
answers when told not to.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from stitch_lsp.pipeline import Candidate
from stitch_lsp.settings import Settings
from stitch_lsp.contract.verify import VerifyJob, VerifyOptions
from tests.jobs.test_kernel_checks_e2e import workspace
from tests.verify.counting_pool import make

REPO = Path(__file__).resolve().parents[2]
COUNTING = "tests.verify.counting_pool:make"


def verify_kernel(tmp_path: Path, log: Path, *args: str) -> subprocess.CompletedProcess:
    env = {"PYTHONPATH": str(REPO), "STITCH_TEST_VERIFIER": COUNTING, "COUNTING_POOL_LOG": str(log),
           "PATH": "/usr/bin:/bin"}
    return subprocess.run([sys.executable, "-m", "stitch_lsp.cli", "verify-kernel", "gelu.cu", *args],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)


def reached(log: Path) -> list[dict]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def test_no_cache_gets_past_the_result_cache_and_the_verdict_cache(tmp_path):
    workspace(tmp_path)
    (tmp_path / "pyproject.toml").write_text("")
    log = tmp_path / "pool.jsonl"
    first = verify_kernel(tmp_path, log)
    assert first.returncode == 0, first.stderr
    assert "2.00× ±0.02 eager · 0.47× ±0.01 torch.compile" in first.stdout
    assert len(reached(log)) == 1 and "cached" not in first.stdout

    again = verify_kernel(tmp_path, log, "--json")
    [entry] = json.loads(again.stdout)
    assert entry["cached"] is True and len(reached(log)) == 1  # answered by a cache, as it should be
    assert entry["verdict"]["from_cache"] is True and entry["measured_at"].endswith("UTC")

    # With the result cache's entry gone, the Verifier's own verdict cache still holds the answer:
    for f in (tmp_path / ".stitch" / "cache").rglob("*.json"):
        f.unlink()
    third = verify_kernel(tmp_path, log)
    assert len(reached(log)) == 1, "the Verifier's own cache should answer a plain repeat"
    assert "(cached, measured " in third.stdout

    fresh = verify_kernel(tmp_path, log, "--no-cache", "--json")
    assert fresh.returncode == 0, fresh.stderr
    [entry] = json.loads(fresh.stdout)
    calls = reached(log)
    assert len(calls) == 2, "--no-cache was answered by a cache layer instead of the worker"
    assert calls[-1]["use_cache"] is False  # the worker is told too: no reused compiled baseline
    assert entry["cached"] is False and entry["verdict"]["from_cache"] is False


def test_the_verifier_skips_its_verdict_cache_when_told(tmp_path, monkeypatch):
    log = tmp_path / "pool.jsonl"
    monkeypatch.setenv("COUNTING_POOL_LOG", str(log))
    verifier = make(Settings(), tmp_path / "work")
    candidate = Candidate(module_source="class ModelNew: pass\n")
    first = verifier.verify("ref = 1\n", candidate, VerifyOptions())
    second = verifier.verify("ref = 1\n", candidate, VerifyOptions())
    assert len(reached(log)) == 1 and second.from_cache and not first.from_cache
    assert second.measured_at == first.measured_at
    third = verifier.verify("ref = 1\n", candidate, VerifyOptions(use_cache=False))
    assert len(reached(log)) == 2 and not third.from_cache


torch = pytest.importorskip("torch")


def test_the_worker_compiles_the_baseline_again_when_told(tmp_path, monkeypatch):
    from stitch_lsp.worker.verify import run as verify_run

    compiles: list[tuple] = []

    def fake_compile(model, mode=None):
        compiles.append((model, mode))
        return lambda *a: model(*a)

    monkeypatch.setattr(verify_run.torch, "compile", fake_compile)
    ref = tmp_path / "reference.py"
    ref.write_text("# reference\n")
    cand = tmp_path / "candidate.py"
    cand.write_text("# candidate\n")
    ctx = SimpleNamespace(state={})
    model = torch.nn.Linear(4, 4)
    args = [torch.zeros(2, 4)]

    def compiled(**opts):
        run = verify_run.VerifyRun(VerifyJob(str(ref), str(cand), options=VerifyOptions(**opts)), ctx)
        return run.compiled_reference(model, args)

    a = compiled()
    assert len(compiles) == 1
    assert compiled() is a and len(compiles) == 1 and ctx.state["compiled_reused"]  # reused across saves
    b = compiled(use_cache=False)
    assert len(compiles) == 2 and b is not a and not ctx.state["compiled_reused"], "the kept baseline answered"
    compiled(compile_mode="max-autotune-no-cudagraphs")
    assert len(compiles) == 3 and compiles[-1][1] == "max-autotune-no-cudagraphs"  # another mode: compiled anew
    compiled(compile_mode="max-autotune-no-cudagraphs")
    assert len(compiles) == 3
    run = verify_run.VerifyRun(VerifyJob(str(ref), str(cand), options=VerifyOptions()), ctx)
    run.compiled_reference(model, [torch.zeros(3, 4)])  # another shape: compiled anew
    assert len(compiles) == 4
