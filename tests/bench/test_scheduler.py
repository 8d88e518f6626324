"""Handing tasks to one worker per GPU: in-process stand-ins for the GPU workers."""

from __future__ import annotations

import time

from stitch_lsp.benchsuite.results import INTERRUPTED, TaskResult
from stitch_lsp.benchsuite.scheduler import WorkerLost, run_tasks
from stitch_lsp.benchsuite.tasks import BenchTask
from stitch_lsp.cancellation import CancelToken


def tasks(n):
    return [BenchTask(name=f"t{i:02d}", path=f"t{i:02d}.py") for i in range(n)]


class FakeWorker:
    def __init__(self, slot, delay=0.01, broken=False):
        self.slot, self.delay, self.broken = slot, delay, broken
        self.ran: list[str] = []
        self.closed = False

    def run(self, task, cancel, on_progress=lambda _: None):
        if self.broken:
            raise OSError("cannot start")
        on_progress("timing")
        deadline = time.monotonic() + self.delay
        while time.monotonic() < deadline:
            if cancel.cancelled:
                return TaskResult(name=task.name, status=INTERRUPTED), None
            time.sleep(0.005)
        self.ran.append(task.name)
        return TaskResult(name=task.name, status="correct", gpu=self.slot), None

    def close(self):
        self.closed = True


class RecordingListener:
    def __init__(self, on_finished=None):
        self.starts, self.results, self.messages = [], [], []
        self.on_finished = on_finished

    def started(self, slot, task):
        self.starts.append((slot, task.name))

    def progress(self, slot, task, message):
        self.messages.append((slot, task.name, message))

    def finished(self, slot, task, result, detail):
        self.results.append((slot, result))
        if self.on_finished:
            self.on_finished(len(self.results))


def test_every_task_runs_once_spread_over_the_workers():
    workers = [FakeWorker("0", delay=0.02), FakeWorker("1", delay=0.02)]
    listener = RecordingListener()
    outcome = run_tasks(tasks(12), workers, listener, CancelToken())
    names = sorted(r.name for _, r in listener.results)
    assert names == [t.name for t in tasks(12)]
    assert workers[0].ran and workers[1].ran  # both GPUs took work
    assert sorted(workers[0].ran + workers[1].ran) == names
    assert all(w.closed for w in workers)
    assert outcome.not_run == [] and not outcome.interrupted
    assert {slot for slot, _ in listener.starts} == {"0", "1"}
    assert listener.messages and listener.messages[0][2] == "timing"


def test_a_broken_worker_leaves_its_tasks_to_the_others():
    good, bad = FakeWorker("0"), FakeWorker("1", broken=True)
    listener = RecordingListener()
    outcome = run_tasks(tasks(5), [bad, good], listener, CancelToken())
    assert sorted(good.ran) == [t.name for t in tasks(5)]
    assert outcome.errors and "cannot start" in outcome.errors[0]
    assert outcome.not_run == []


def test_all_workers_broken_reports_everything_not_run():
    outcome = run_tasks(tasks(3), [FakeWorker("0", broken=True)], RecordingListener(), CancelToken())
    assert outcome.not_run == ["t00", "t01", "t02"]


def test_cancel_stops_and_reports_what_did_not_finish():
    token = CancelToken()
    listener = RecordingListener(on_finished=lambda n: token.cancel("interrupted") if n == 2 else None)
    workers = [FakeWorker("0", delay=0.05), FakeWorker("1", delay=0.2)]
    outcome = run_tasks(tasks(8), workers, listener, token)
    assert outcome.interrupted
    done = {r.name for _, r in listener.results}
    assert len(done) == 2
    assert set(outcome.not_run) == {t.name for t in tasks(8)} - done  # the in-flight one included
    assert outcome.not_run == sorted(outcome.not_run)


def test_budget_stops_starting_new_tasks():
    now = [0.0]

    class SlowClockWorker(FakeWorker):
        def run(self, task, cancel, on_progress=lambda _: None):
            now[0] += 10.0  # every task takes 10 "seconds"
            return super().run(task, cancel, on_progress)

    listener = RecordingListener()
    outcome = run_tasks(tasks(10), [SlowClockWorker("0")], listener, CancelToken(), budget_s=25.0,
                        clock=lambda: now[0])
    assert len(listener.results) == 3  # started at 0, 10 and 20
    assert outcome.stopped_by_budget and not outcome.interrupted
    assert len(outcome.not_run) == 7


def test_progress_printer_heartbeat_names_what_is_still_running(tmp_path):
    import io

    from stitch_lsp.benchsuite.store import RunStore
    from stitch_lsp.benchsuite.suite import ProgressPrinter

    now = [100.0]
    out = io.StringIO()
    printer = ProgressPrinter(out, RunStore(tmp_path), total=3, done=1, verbose=False, heartbeat_s=30,
                              clock=lambda: now[0])
    task = BenchTask(name="red_softmax_causal_fp32", path="x.py")
    printer.started("0", task)
    printer.progress("0", task, "timing eager / compile / candidate")
    now[0] += 10
    printer.tick()
    assert "running" not in out.getvalue()  # not yet
    now[0] += 25
    printer.tick()
    assert "running: gpu 0: red_softmax_causal_fp32 (timing, 35 s)" in out.getvalue()
    assert "timing eager" not in out.getvalue()  # stage lines only with --verbose
    printer.finished("0", task, TaskResult(name=task.name, status="incorrect", reason="failed seed-1"), None)
    assert "[  2/3] gpu 0: red_softmax_causal_fp32: incorrect: failed seed-1" in out.getvalue()
    assert (tmp_path / "results" / "red_softmax_causal_fp32.json").is_file()
    before = out.getvalue()
    now[0] += 100
    printer.tick()
    assert out.getvalue() == before  # nothing running, nothing to say


class LosingWorker(FakeWorker):
    """Loses the named tasks (as a cluster worker whose node goes down), ``revives`` or not."""

    def __init__(self, slot, lose=(), revives=True, **kw):
        super().__init__(slot, **kw)
        self.lose, self.revives = set(lose), revives
        self.revived = 0

    def run(self, task, cancel, on_progress=lambda _: None):
        if task.name in self.lose:
            time.sleep(0.05)  # the others have emptied the queue by now: they must wait for it to come back
            raise WorkerLost("its actor died")
        return super().run(task, cancel, on_progress)

    def revive(self, cancel):
        self.revived += 1
        self.lose = set()
        return self.revives


class LostListener(RecordingListener):
    def __init__(self):
        super().__init__()
        self.losses = []

    def lost(self, slot, task, reason):
        self.losses.append((slot, task.name, reason))


def test_a_lost_task_runs_again_elsewhere_and_is_marked():
    dying = LosingWorker("1", lose={"t00"}, revives=False)
    steady = FakeWorker("0", delay=0.001)
    listener = LostListener()
    outcome = run_tasks(tasks(3), [dying, steady], listener, CancelToken())
    results = {r.name: (slot, r) for slot, r in listener.results}
    assert sorted(results) == ["t00", "t01", "t02"] and outcome.not_run == []
    slot, lost = results["t00"]
    assert slot == "0" and lost.retried == ["gpu 1: its actor died"]  # ran again on the other worker, and says so
    assert all(not r.retried for name, (_, r) in results.items() if name != "t00")
    assert listener.losses == [("1", "t00", "its actor died")]
    assert outcome.errors == ["worker 1 lost: its actor died"]  # not revived: it left the run


def test_a_revived_worker_keeps_taking_tasks():
    worker = LosingWorker("0", lose={"t01"})
    listener = LostListener()
    outcome = run_tasks(tasks(4), [worker], listener, CancelToken())
    assert worker.revived == 1 and outcome.errors == []
    assert sorted(r.name for _, r in listener.results) == ["t00", "t01", "t02", "t03"]
    assert [r.retried for _, r in listener.results if r.name == "t01"] == [["gpu 0: its actor died"]]


def test_a_task_lost_every_time_ends_as_crashed_after_three_attempts():
    class AlwaysLoses(LosingWorker):
        def revive(self, cancel):
            self.revived += 1
            return True  # a fresh worker, which loses it again

    worker = AlwaysLoses("0", lose={"t00"})
    listener = LostListener()
    outcome = run_tasks(tasks(2), [worker], listener, CancelToken())
    result = next(r for _, r in listener.results if r.name == "t00")
    assert result.status == "crashed" and "lost 3 times" in result.reason and len(result.retried) == 3
    assert len(listener.losses) == 2 and outcome.not_run == []
