"""The candidate pool: an executor's GPU workers as one verifier for the LLM Coder."""

from __future__ import annotations

import io
import threading

from stitch_lsp.benchsuite.candidate_pool import CandidatePool
from stitch_lsp.benchsuite.executor import LocalExecutor, WorkerSpec
from stitch_lsp.benchsuite.scheduler import WorkerLost
from stitch_lsp.pipeline import Candidate
from stitch_lsp.settings import Settings
from stitch_lsp.verdict import Verdict, VerdictStatus
from tests.bench.test_suite_run import BACKEND, log  # noqa: F401  (the stand-in's execution log)


def candidate(kind: str) -> Candidate:
    return Candidate(module_source=f"class ModelNew: pass\n# fake: {kind}\n", cuda_sources={"kernel.cu": "//"})


def test_local_gpus_verify_candidates_at_once_each_in_its_own_shard(tmp_path, monkeypatch, log):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    monkeypatch.setenv("STITCH_FAKE_BENCH_VERIFY_S", "0.5")
    executor = LocalExecutor()
    pool = CandidatePool(executor.start(WorkerSpec(coder="llm", settings=Settings(), run_dir=tmp_path,
                                                   backend=BACKEND), 2, io.StringIO()), executor)
    verdicts: dict[str, Verdict] = {}
    try:
        assert pool.slots == 2
        threads = [threading.Thread(target=lambda k=k: verdicts.__setitem__(k, pool.verify("ref", candidate(k))))
                   for k in ("correct 2.5", "compile_error")]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
    finally:
        pool.close()
    assert verdicts["correct 2.5"].timing.speedup_vs_eager == 2.5
    assert verdicts["compile_error"].status is VerdictStatus.COMPILE_ERROR
    rows = [row for row in log() if row[0] == "verify"]
    assert sorted(row[1] for row in rows) == ["0", "1"]  # one candidate on each GPU
    assert max(float(r[3]) for r in rows) < min(float(r[4]) for r in rows)  # at the same time


class Flaky:
    def __init__(self, slot, lose=False, revives=False):
        self.slot, self.lose, self.revives, self.closed, self.calls = slot, lose, revives, False, 0

    def verify(self, reference_source, candidate, options=None, *, cancel=None, report=None):
        self.calls += 1
        if self.lose:
            raise WorkerLost("its actor died")
        return Verdict(VerdictStatus.CORRECT, summary=f"on {self.slot}")

    def revive(self, cancel):
        self.lose = False
        return self.revives

    def close(self):
        self.closed = True


def test_a_lost_worker_is_dropped_and_the_candidate_verified_on_another():
    lost, steady = Flaky("a", lose=True), Flaky("b")
    pool = CandidatePool([lost, steady])
    verdicts = [pool.verify("ref", candidate("correct")) for _ in range(3)]
    assert all(v.summary == "on b" for v in verdicts)
    assert pool.slots == 1 and lost.closed and lost.calls == 1


def test_a_revived_worker_stays_and_without_workers_the_verdict_says_why():
    revived = Flaky("a", lose=True, revives=True)
    pool = CandidatePool([revived])
    assert pool.verify("ref", candidate("correct")).summary == "on a" and pool.slots == 1
    gone = CandidatePool([Flaky("z", lose=True)])
    verdict = gone.verify("ref", candidate("correct"))
    assert verdict.status is VerdictStatus.ERROR and "its GPU worker was lost (gpu z: its actor died)" in verdict.summary
