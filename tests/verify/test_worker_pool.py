"""The worker pool: reuse, crashes, hangs, OOM, cancellation, secrets (CPU stand-ins, no GPU)."""

from __future__ import annotations

import os
from pathlib import Path
import threading
import time

import pytest

from stitch_lsp.cancellation import CancelToken
from stitch_lsp.settings import Settings
from stitch_lsp.verify.worker_pool import WorkerDied, WorkerError, WorkerPool


@pytest.fixture()
def pool(tmp_path):
    p = WorkerPool(Settings(), tmp_path, preload="")
    yield p
    p.close()


def test_worker_is_reused_between_jobs(pool):
    first, fresh1 = pool.call_raw("ping", {"n": 1}, timeout_s=60)
    second, fresh2 = pool.call_raw("ping", {"n": 2}, timeout_s=60)
    assert first["echo"] == {"n": 1} and second["echo"] == {"n": 2}
    assert first["pid"] == second["pid"]
    assert fresh1 and not fresh2


@pytest.mark.parametrize("mode,reason,words", [
    ("abort", "crashed", "SIGABRT"),
    ("segfault", "crashed", "SIGSEGV"),
    ("exit", "crashed", "exit code 3"),
    ("memory", "out_of_memory", "MemoryError"),
])
def test_a_dying_job_costs_one_worker(pool, mode, reason, words):
    before, _ = pool.call_raw("ping", None, timeout_s=60)
    with pytest.raises(WorkerDied) as info:
        pool.call_raw("test_crash", {"mode": mode}, timeout_s=60)
    assert info.value.reason == reason
    assert words in info.value.message
    after, fresh = pool.call_raw("ping", None, timeout_s=60)
    assert fresh and after["pid"] != before["pid"]
    assert any("lost" in e or "retired" in e for e in pool.events)


def test_hang_is_killed_with_its_process_group(pool):
    with pytest.raises(WorkerDied) as info:
        pool.call_raw("test_crash", {"mode": "child_hang"}, timeout_s=3)
    assert info.value.reason == "timeout"
    # The grandchild (sleep 1000) went with the worker's process group.
    time.sleep(0.3)
    out = os.popen("ps -eo pid,args").read()
    assert "sleep 1000" not in out


def test_cancel_kills_the_worker(pool):
    token = CancelToken()
    threading.Timer(1.0, token.cancel).start()
    started = time.monotonic()
    with pytest.raises(WorkerDied) as info:
        pool.call_raw("test_crash", {"mode": "hang"}, timeout_s=60, cancel=token)
    assert info.value.reason == "cancelled"
    assert time.monotonic() - started < 15
    assert pool.call_raw("ping", 1, timeout_s=60)[0]["echo"] == 1


def test_handler_bug_is_an_error_and_the_next_job_gets_a_fresh_worker(pool):
    pid = pool.call_raw("ping", None, timeout_s=60)[0]["pid"]
    with pytest.raises(WorkerError) as info:
        pool.call_raw("test_crash", {"mode": "raise"}, timeout_s=60)
    assert "stand-in handler bug" in info.value.message
    # Whatever it left half done (tensors its frames held, a patched module) stays behind.
    after, fresh = pool.call_raw("ping", None, timeout_s=60)
    assert fresh and after["pid"] != pid
    assert any("retired: the handler raised ValueError" in e for e in pool.events)


class _FakeCuda:
    def __init__(self, allocated: int, fails: bool = False) -> None:
        self.allocated, self.fails = allocated, fails

    def is_initialized(self) -> bool:
        return True

    def synchronize(self) -> None:
        if self.fails:
            raise RuntimeError("CUDA error: an illegal memory access was encountered")

    def empty_cache(self) -> None:
        pass

    def memory_allocated(self) -> int:
        return self.allocated


@pytest.mark.parametrize("allocated,kept,fails,words", [
    (64 << 20, 0, False, ""),
    (3 << 30, 0, False, "3.00 GiB of device memory still allocated"),
    (3 << 30, 3 << 30, False, ""),  # what a handler keeps on purpose (a compiled reference), declared
    (0, 0, True, "CUDA context is unusable"),
])
def test_a_worker_that_kept_device_memory_or_a_broken_context_takes_no_more_jobs(
        monkeypatch, tmp_path, allocated, kept, fails, words):
    import sys
    import types

    from stitch_lsp.worker.main import WorkerContext, _leftover

    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(cuda=_FakeCuda(allocated, fails)))
    ctx = WorkerContext(open(tmp_path / "out", "wb"), tmp_path)
    ctx.state["kept_cuda_bytes"] = kept
    reason = _leftover(ctx)
    assert (words in reason) if words else reason == ""


def test_unknown_kind(pool):
    with pytest.raises(WorkerError) as info:
        pool.call_raw("no_such_kind", None, timeout_s=60)
    assert info.value.error == "unknown_kind"


def test_worker_does_not_inherit_api_keys(pool, monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-secret")
    monkeypatch.setenv("SOME_SERVICE_TOKEN", "t")
    env = pool.call_raw("test_crash", {"mode": "env"}, timeout_s=60)[0]["env"]
    assert "ANTHROPIC_API_KEY" not in env and "SOME_SERVICE_TOKEN" not in env


def test_print_in_worker_does_not_corrupt_the_pipe(tmp_path):
    # A handler's (or candidate's) stdout goes to the worker log, never into the frames.
    pool = WorkerPool(Settings(), tmp_path, preload="")
    try:
        assert pool.call_raw("ping", "x" * 100_000, timeout_s=60)[0]["echo"] == "x" * 100_000
    finally:
        pool.close()


def test_worker_never_loads_the_editor_layer(tmp_path):
    # After a real verify job, the worker process holds no pygls / lsprotocol / stitch_lsp.lsp.
    from stitch_lsp.pipeline import Candidate
    from stitch_lsp.verify.service import Verifier, VerifyOptions

    corpus = Path(__file__).resolve().parent / "corpus" / "cpu"
    verifier = Verifier(Settings(), tmp_path)
    try:
        v = verifier.verify((corpus / "ref_relu_scale.py").read_text(),
                            Candidate(module_source=(corpus / "honest_numpy.py").read_text()),
                            VerifyOptions(device="cpu", timing=False, profile=True, sanitize=True))
        assert v.status.value == "correct", v.summary
        assert v.profile.status == "skipped" and "CPU test mode" in v.profile.message
        assert v.sanitizer.status == "skipped"
        modules = verifier.pool.call_raw("test_crash", {"mode": "modules"}, timeout_s=60)[0]
        assert modules["loaded"] == []
        assert modules["job_modules"] == []  # the job's reference and candidate went with it
    finally:
        verifier.close()


def test_missing_ncu_and_sanitizer_are_skipped_with_the_reason(tmp_path, monkeypatch):
    from stitch_lsp.verify import nsight
    from stitch_lsp.contract.verify import VerifyJob

    monkeypatch.setenv("PATH", str(tmp_path))  # neither tool is found
    job = VerifyJob(reference_path=str(tmp_path / "r.py"), candidate_path=str(tmp_path / "c.py"))
    p = nsight.profile(Settings(), job, tmp_path)
    s = nsight.sanitize(Settings(), job, tmp_path)
    assert p.status == "skipped" and "ncu" in p.message
    assert s.status == "skipped" and "compute-sanitizer" in s.message


def test_job_folders_are_pruned(tmp_path):
    from stitch_lsp.pipeline import Candidate
    from stitch_lsp.verify.service import materialise, prune_job_dirs

    for i in range(5):
        materialise(tmp_path, "ref", Candidate(module_source=f"x = {i}\n", cuda_sources={"k.cu": "//"}))
    assert len([d for d in tmp_path.iterdir() if d.is_dir()]) == 5
    prune_job_dirs(tmp_path, keep=2)
    left = [d for d in tmp_path.iterdir() if d.is_dir()]
    assert len(left) == 2 and all((d / "candidate.py").exists() and (d / "k.cu").exists() for d in left)
