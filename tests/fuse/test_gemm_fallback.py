"""``gemm = "auto"``: a GEMM-family candidate the Verifier does not pass falls back to the GEMM on cuBLAS.

The Verifier is a stand-in that judges by what the candidate is (a Triton GEMM kernel or not), as the
H100 did on the tasks where only the adversarial-large trial told them apart; the task is traced once
in this process instead of in a worker for every fuse.
"""

from __future__ import annotations

import pytest

from stitch_lsp.fuse import service as fuse_service
from stitch_lsp.fuse.fallbacks import uses_gemm_family
from stitch_lsp.fuse.service import fuse_task
from stitch_lsp.benchsuite import runner
from stitch_lsp.benchsuite.tasks import BenchTask
from stitch_lsp.pipeline import Task
from stitch_lsp.settings import Settings
from stitch_lsp.verdict import Trial, Verdict, VerdictStatus
from tests.llm.verifiers import SplitVerifier, behind_compile, correct, large_trial_failed

trace_handler = pytest.importorskip("stitch_lsp.worker.trace_handler")

# An fp32 GEMM large enough for `auto` to give it to the GEMM family (0.27 GFLOP), and an epilogue.
SOURCE = """
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(1024, 1024)

    def forward(self, x):
        return torch.softmax(torch.relu(self.lin(x)) * 2.0, dim=-1)

def get_inputs():
    return [torch.randn(128, 1024)]

def get_init_inputs():
    return []
"""

def Judge(family: Verdict, cublas: Verdict | None = None) -> SplitVerifier:  # noqa: N802 - reads as a class
    """Answers ``family`` for a candidate with a GEMM-family kernel, ``cublas`` for one without."""
    return SplitVerifier(uses_gemm_family, family, cublas or correct(1.03))


@pytest.fixture(scope="module")
def traced_reply():
    reply = trace_handler.trace_task(SOURCE)
    assert reply.ok, reply.message
    return reply


@pytest.fixture(autouse=True)
def traced_here(monkeypatch, traced_reply):
    monkeypatch.setattr(fuse_service, "trace", lambda *a, **k: traced_reply)
    monkeypatch.delenv("STITCH_GEMM", raising=False)


def fuse(tmp_path, verifier, **kw):
    task = Task(name="mlp", source=SOURCE, origin_path="model.py")
    return fuse_task(task, Settings(), verifier=verifier, workdir=tmp_path,
                     edit_namer=lambda _o: ("stitch_kernels/fused_mlp.py", "fused_mlp"), **kw)


def test_a_failing_gemm_family_candidate_falls_back_to_cublas_and_says_why(tmp_path):
    verifier = Judge(large_trial_failed(0.0123, 2, 131072))
    outcome = fuse(tmp_path, verifier)
    first, second = verifier.seen
    assert uses_gemm_family(first) and not uses_gemm_family(second)  # both judged, the family's first
    assert outcome.offerable and outcome.candidate is second and outcome.verdict.status is VerdictStatus.CORRECT
    assert "GEMM on cuBLAS" in outcome.message and "failed adversarial-large" in outcome.message
    assert "1.03× eager" in outcome.message  # the speed is the judged candidate's
    assert "GEMM family not used" in outcome.plan_text and "adversarial-large" in outcome.plan_text
    assert outcome.family_verdict is not None and outcome.family_verdict.status is VerdictStatus.INCORRECT
    # The edit is the candidate that passed: no Triton kernel, and it re-lowers with GEMMs on cuBLAS.
    (module,) = [t for p, t in outcome.edit_files.items() if p.endswith("fused_mlp.py")]
    assert "stitch_gemm_" not in module and "_GEMM_MODE = 'cublas'" in module
    # Both are kept for reading: the offered one in the task folder, the family's beside it.
    task_dir = tmp_path / ".stitch" / "tasks" / outcome.task.key()
    assert "stitch_gemm_" not in (task_dir / "candidate.py").read_text()
    assert not list(task_dir.glob("stitch_gemm_*.py"))
    assert '"incorrect"' in (task_dir / "gemm_family" / "verdict.json").read_text()
    assert list((task_dir / "gemm_family").glob("stitch_gemm_*.py"))


def test_no_fallback_when_the_family_passes_or_was_asked_for_or_nothing_could_run(tmp_path, monkeypatch):
    verifier = Judge(correct(1.6))
    outcome = fuse(tmp_path, verifier)
    assert len(verifier.seen) == 1 and uses_gemm_family(outcome.candidate) and outcome.offerable
    assert not outcome.gemm_fallback and "1.60× eager" in outcome.message

    verifier = Judge(Verdict(VerdictStatus.NO_GPU, summary="no CUDA GPU visible to the worker"))
    outcome = fuse(tmp_path, verifier)
    assert len(verifier.seen) == 1 and "No CUDA device" in outcome.message

    monkeypatch.setenv("STITCH_GEMM", "triton")  # asked for explicitly: the family, pass or fail
    verifier = Judge(large_trial_failed(0.0123, 2, 131072))
    outcome = fuse(tmp_path, verifier)
    assert len(verifier.seen) == 1 and not outcome.offerable and not outcome.gemm_fallback
    assert "not offered" in outcome.message


def test_when_both_fail_the_message_gives_both_reasons(tmp_path):
    cublas_wrong = large_trial_failed(0.0123, 2, 131072)
    cublas_wrong.correctness.trials[0] = Trial("seed-1", False, max_abs_err=0.5, detail="4096 of 131072 values off")
    outcome = fuse(tmp_path, Judge(large_trial_failed(0.0123, 2, 131072), cublas_wrong))
    assert not outcome.offerable and uses_gemm_family(outcome.candidate)  # the first judgement stands
    assert "failed adversarial-large" in outcome.message and "failed seed-1" in outcome.message
    assert (tmp_path / ".stitch" / "tasks" / outcome.task.key() / "gemm_cublas" / "verdict.json").exists()


def test_the_bench_row_is_the_judged_candidate_and_notes_the_fallback(tmp_path, monkeypatch):
    path = tmp_path / "gemm_softmax_fp32.py"
    path.write_text(SOURCE)
    monkeypatch.setattr(runner._state, "workdir", tmp_path / "work")
    monkeypatch.setattr(runner._state, "verifier", runner.OptionsVerifier(Judge(large_trial_failed(0.0123, 2, 131072)), profile="none"))
    result, detail = runner.run_task(BenchTask(name=path.stem, path=str(path)), Settings(), "template",
                                     fuse_service.CancelToken(), lambda e: None)
    assert result.status == "correct" and result.speedup_vs_eager == pytest.approx(1.03)
    assert result.gemm_fallback.startswith("GEMM on cuBLAS") and "adversarial-large" in result.gemm_fallback
    assert "GEMM on cuBLAS" in result.reason  # the table's note beside "correct"
    assert not uses_gemm_family(detail.candidate) and detail.verdict.status is VerdictStatus.CORRECT


def test_a_family_kernel_slower_than_eager_gives_way_to_a_faster_cublas_candidate(tmp_path):
    verifier = Judge(correct(0.4), correct(1.2))
    outcome = fuse(tmp_path, verifier)
    first, second = verifier.seen
    assert uses_gemm_family(first) and not uses_gemm_family(second)
    assert outcome.offerable and outcome.candidate is second
    assert "ran at 0.40x eager, slower than cuBLAS" in outcome.message and "1.20× eager" in outcome.message
    assert "GEMM family not used" in outcome.plan_text


def test_a_slow_family_kernel_stays_when_the_cublas_candidate_is_no_faster(tmp_path):
    verifier = Judge(correct(0.9), correct(0.8))
    outcome = fuse(tmp_path, verifier)
    assert len(verifier.seen) == 2 and uses_gemm_family(outcome.candidate) and outcome.offerable
    assert "no faster" in outcome.message and "0.90× eager" in outcome.message


BARE_GEMM = """
import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, a, b):
        return torch.matmul(a, b)

def get_inputs():
    return [torch.randn(512, 1024), torch.randn(1024, 1024)]

def get_init_inputs():
    return []
"""


def test_a_bare_gemm_slower_on_the_family_is_not_offered_and_the_bench_times_cublas(tmp_path, monkeypatch):
    reply = trace_handler.trace_task(BARE_GEMM)
    assert reply.ok, reply.message
    monkeypatch.setattr(fuse_service, "trace", lambda *a, **k: reply)
    verifier = Judge(correct(0.05))
    outcome = fuse_task(Task(name="mm", source=BARE_GEMM, origin_path="model.py"), Settings(), verifier=verifier,
                        workdir=tmp_path, edit_namer=lambda _o: ("stitch_kernels/fused_mm.py", "fused_mm"))
    assert len(verifier.seen) == 1 and not outcome.offerable  # a 20x slower kernel is no offer
    assert "not offered" in outcome.message and "0.05x eager" in outcome.message

    path = tmp_path / "bare_gemm_fp32.py"
    path.write_text(BARE_GEMM)
    monkeypatch.setattr(runner._state, "workdir", tmp_path / "work")
    monkeypatch.setattr(runner._state, "verifier", runner.OptionsVerifier(Judge(correct(0.05)), profile="none"))
    result, detail = runner.run_task(BenchTask(name=path.stem, path=str(path)), Settings(), "template",
                                     fuse_service.CancelToken(), lambda e: None)
    # The bench judges the library call alone instead: the row is cuBLAS's, and says why.
    assert result.status == "correct" and result.speedup_vs_eager == pytest.approx(1.03)
    assert not uses_gemm_family(detail.candidate) and "slower than cuBLAS" in result.gemm_fallback


def test_a_family_kernel_behind_torch_compile_gives_way_to_a_faster_cublas_candidate(tmp_path):
    verifier = Judge(behind_compile(1.03, 0.81), correct(1.25))
    outcome = fuse(tmp_path, verifier)
    first, second = verifier.seen
    assert uses_gemm_family(first) and not uses_gemm_family(second)
    assert outcome.offerable and outcome.candidate is second
    assert "0.81x torch.compile" in outcome.message and "1.25× eager" in outcome.message


def test_a_family_kernel_behind_torch_compile_stays_offered_when_cublas_is_no_faster(tmp_path):
    verifier = Judge(behind_compile(1.03, 0.81), correct(1.01))
    outcome = fuse(tmp_path, verifier)
    assert len(verifier.seen) == 2 and uses_gemm_family(outcome.candidate) and outcome.offerable
    assert "no faster" in outcome.message and "1.03× eager" in outcome.message
    # Within noise of torch.compile: no second candidate is generated or timed.
    level = behind_compile(1.03, 0.99)
    level.timing.speedup_vs_compile_ci = [0.97, 1.01]
    verifier = Judge(level)
    outcome = fuse(tmp_path, verifier)
    assert len(verifier.seen) == 1 and outcome.offerable


def test_a_bare_gemm_behind_torch_compile_but_ahead_of_eager_is_still_offered(tmp_path, monkeypatch):
    reply = trace_handler.trace_task(BARE_GEMM)
    assert reply.ok, reply.message
    monkeypatch.setattr(fuse_service, "trace", lambda *a, **k: reply)
    verifier = Judge(behind_compile(1.10, 0.9))
    outcome = fuse_task(Task(name="mm", source=BARE_GEMM, origin_path="model.py"), Settings(), verifier=verifier,
                        workdir=tmp_path, edit_namer=lambda _o: ("stitch_kernels/fused_mm.py", "fused_mm"))
    assert len(verifier.seen) == 1 and outcome.offerable and "1.10× eager" in outcome.message
