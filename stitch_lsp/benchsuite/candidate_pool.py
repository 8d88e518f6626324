"""An executor's GPU workers as one verifier, so the LLM Coder verifies a round's candidates at once.

``CandidatePool(workers).verify(...)`` has the Verifier's signature and hands each
call to a free worker (a local shard process per GPU, or a Ray actor per cluster
GPU); ``slots`` tells the LLM Coder how many calls may run together. A worker lost
under a candidate (node down) is replaced where the executor can, else dropped,
and the candidate is verified on another.
"""

from __future__ import annotations

import queue
import threading
from typing import Any, Sequence

from stitch_lsp.benchsuite.executor import Executor
from stitch_lsp.benchsuite.scheduler import MAX_ATTEMPTS, Worker, WorkerLost
from stitch_lsp.cancellation import Cancelled, CancelToken
from stitch_lsp.verdict import Verdict, VerdictStatus


class CandidatePool:
    # What the fuse pipeline reads off a verifier: no worker pool here (tracing runs on this
    # machine), no single device (the plan is made without one).
    pool = None
    device = None

    def __init__(self, workers: Sequence[Worker], executor: Executor | None = None) -> None:
        if not workers:
            raise ValueError("a candidate pool needs at least one worker")
        self.executor = executor
        self._workers = list(workers)
        self._free: queue.Queue[Worker] = queue.Queue()
        self._lock = threading.Lock()
        for worker in self._workers:
            self._free.put(worker)

    @property
    def slots(self) -> int:
        with self._lock:
            return len(self._workers)

    def verify(self, reference_source: str, candidate: Any, options: Any = None, *,
               cancel: CancelToken | None = None, report: Any = None) -> Verdict:
        cancel = cancel or CancelToken()
        lost: list[str] = []
        worker = self._take(cancel)
        for _ in range(MAX_ATTEMPTS):
            if worker is None:
                break
            try:
                verdict = worker.verify(reference_source, candidate, options, cancel=cancel,  # type: ignore[attr-defined]
                                        report=report)
            except WorkerLost as exc:
                lost.append(f"gpu {worker.slot}: {exc}")
                revive = getattr(worker, "revive", None)
                if revive is None or not revive(cancel):  # else: the fresh worker takes it at once
                    self._drop(worker)
                    worker = self._take(cancel)
                continue
            except BaseException:
                self._free.put(worker)
                raise
            self._free.put(worker)
            return verdict
        if worker is not None:
            self._free.put(worker)
        if cancel.cancelled:
            raise Cancelled(cancel.reason)
        why = "; ".join(lost) if lost else "no GPU worker left"
        return Verdict(VerdictStatus.ERROR, summary=f"not verified: its GPU worker was lost ({why})", events=lost)

    def _take(self, cancel: CancelToken) -> Worker | None:
        while not cancel.cancelled:
            if not self.slots:
                return None
            try:
                return self._free.get(timeout=0.2)
            except queue.Empty:
                continue
        return None

    def _drop(self, worker: Worker) -> None:
        with self._lock:
            self._workers = [w for w in self._workers if w is not worker]
        try:
            worker.close()
        except Exception:
            pass

    def close(self) -> None:
        with self._lock:
            workers, self._workers = self._workers, []
        for worker in workers:
            try:
                worker.close()
            except Exception:
                pass
        if self.executor is not None:
            self.executor.close()
