"""Whole runs through the real shard processes, with a stand-in backend (no GPU):
one worker per GPU slot with its own CUDA_VISIBLE_DEVICES, timeouts and crashes
cost one task, results survive interruption and --resume skips finished tasks."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from stitch_lsp.benchsuite.results import BenchReport
from stitch_lsp.benchsuite.shard import ShardWorker
from stitch_lsp.benchsuite.suite import BenchError, BenchOptions, run_bench
from stitch_lsp.benchsuite.tasks import BenchTask, TaskFilter
from stitch_lsp.cancellation import CancelToken
from stitch_lsp.serde import from_json
from stitch_lsp.settings import Settings

REPO = Path(__file__).resolve().parents[2]
BACKEND = "tests.bench.fake_backend"
TASK_TEXT = '''
LEVEL = {level}
TAGS = ("{tag}",)
class Model: pass
def get_inputs(): return []
def get_init_inputs(): return []
'''


def make_suite(root: Path, names: list[str]) -> Path:
    suite = root / "tasks"
    suite.mkdir()
    for i, name in enumerate(names):
        (suite / f"{name}.py").write_text(TASK_TEXT.format(level=1 + i % 2, tag="even" if i % 2 == 0 else "odd"))
    (suite / "_helpers.py").write_text("x = 1\n")
    (suite / "notes.py").write_text("print('not a task')\n")
    return suite


@pytest.fixture
def log(tmp_path, monkeypatch):
    path = tmp_path / "runs.log"
    monkeypatch.setenv("STITCH_FAKE_BENCH_LOG", str(path))
    monkeypatch.setenv("STITCH_FAKE_BENCH_SLOW_S", "0.5")

    def read() -> list[list[str]]:
        return [line.split() for line in path.read_text().splitlines()] if path.exists() else []

    return read


def options(tmp_path, suite, **kw) -> BenchOptions:
    return BenchOptions(tasks_dir=suite, run_dir=tmp_path / "run", backend=BACKEND, command="test", **kw)


def test_shard_worker_sets_the_gpu_and_survives_timeouts_and_crashes(tmp_path, log):
    worker = ShardWorker("3", coder="template", settings=Settings(), log_dir=tmp_path / "logs",
                         backend=BACKEND, task_timeout_s=3.0)
    try:
        ok, detail = worker.run(BenchTask(name="pw_a_fp32", path="a.py"), CancelToken())
        assert ok.status == "correct" and ok.gpu == "3" and detail.message == "cvd=3"
        start = time.monotonic()
        hung, _ = worker.run(BenchTask(name="pw_hang_fp32", path="b.py"), CancelToken())
        assert hung.status == "timeout" and "3 s" in hung.reason
        assert time.monotonic() - start < 15
        crashed, _ = worker.run(BenchTask(name="pw_crash_fp32", path="c.py"), CancelToken())
        assert crashed.status == "crashed"
        raised, _ = worker.run(BenchTask(name="pw_raise_fp32", path="d.py"), CancelToken())
        assert raised.status == "error" and "stand-in failure" in raised.reason
        again, _ = worker.run(BenchTask(name="pw_b_fp32", path="e.py"), CancelToken())
        assert again.status == "correct"
        info = worker.gpu_info(CancelToken())
        assert info.copy_bandwidth_gbs == 3000.0 and info.slot == "3"
    finally:
        worker.close()
    pids = {row[2] for row in log()}
    assert len(pids) == 3  # a fresh process after the timeout and after the crash, not after the exception
    assert {row[1] for row in log()} == {"3"}


def test_run_spreads_over_gpus_and_writes_results(tmp_path, log, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    names = [f"pw_slow{i}_fp32" for i in range(6)] + ["red_wrong_fp32"]
    suite = make_suite(tmp_path, names)
    out = io.StringIO()
    report = run_bench(options(tmp_path, suite), Settings(), out=out)
    assert [r.name for r in report.results] == sorted(names)
    assert report.summary.tasks == 7 and report.summary.correct == 6
    assert {row[1] for row in log()} == {"0", "1"}  # each worker saw only its own GPU
    assert {r.gpu for r in report.results} == {"0", "1"}
    assert report.run.gpus[0].copy_bandwidth_gbs == 3000.0
    run_dir = tmp_path / "run"
    assert sorted(p.stem for p in (run_dir / "results").glob("*.json")) == sorted(names)
    saved = from_json((run_dir / "report.json").read_text(), BenchReport)
    assert saved.summary.correct == 6
    assert "red_wrong_fp32" in (run_dir / "table.txt").read_text()
    text = out.getvalue()
    assert "skipped notes.py" in text and "[  7/7]" in text and "incorrect" in text
    # Where each task's time went, from its progress events: the stand-in sleeps 0.5 s in its one step.
    slow = next(r for r in saved.results if r.name == "pw_slow0_fp32")
    assert slow.steps["checking: pw_slow0_fp32"] >= 0.45
    assert sum(slow.steps.values()) == pytest.approx(slow.seconds, abs=0.05)


def test_filters_select_tasks(tmp_path, log, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    suite = make_suite(tmp_path, ["pw_a_fp32", "pw_b_fp32", "norm_c_fp32", "red_d_bf16"])
    report = run_bench(options(tmp_path, suite, filter=TaskFilter(levels=[1])), Settings(), out=io.StringIO())
    assert [r.name for r in report.results] == ["norm_c_fp32", "pw_a_fp32"]
    with pytest.raises(BenchError, match="match the filters"):
        run_bench(BenchOptions(tasks_dir=suite, run_dir=tmp_path / "r2", backend=BACKEND,
                               filter=TaskFilter(tags=["gemm"])), Settings(), out=io.StringIO())


def test_interrupt_then_resume_runs_only_what_is_missing(tmp_path, log, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    names = [f"pw_slow{i}_fp32" for i in range(5)]
    suite = make_suite(tmp_path, names)
    token = CancelToken()

    class StopAfterTwo(io.StringIO):
        def write(self, text):
            if "[  2/5] gpu 0: pw_slow1_fp32:" in text:
                token.cancel("interrupted")
            return super().write(text)

    first = run_bench(options(tmp_path, suite), Settings(), out=StopAfterTwo(), cancel=token)
    assert first.run.interrupted
    assert [r.name for r in first.results] == names[:2]
    assert first.not_run == names[2:]
    with pytest.raises(BenchError, match="--resume"):
        run_bench(options(tmp_path, suite), Settings(), out=io.StringIO())

    runs_before = len(log())
    second = run_bench(options(tmp_path, suite, resume=True), Settings(), out=io.StringIO())
    ran_now = [row[0] for row in log()[runs_before:]]
    assert sorted(ran_now) == names[2:]  # the finished two were skipped
    assert [r.name for r in second.results] == names and not second.not_run
    assert second.summary.correct == 5

    with pytest.raises(BenchError, match="same coder"):
        run_bench(options(tmp_path, suite, resume=True, coder="llm"), Settings(), out=io.StringIO())


# Ctrl-C as a terminal delivers it: the CLI starts with Python's own SIGINT handler even where the process
# running the tests ignores SIGINT (a pytest-xdist worker can, and a child inherits an ignored signal).
_ENTRY = ("import signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
          "from stitch_lsp.cli import main; sys.exit(main())")


def _cli(args, env, **kw):
    return subprocess.Popen([sys.executable, "-c", _ENTRY, "bench", *args], cwd=env["HOME"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)


def ctrl_c_after_two(args: list[str], env: dict[str, str], run_dir: Path, timeout_s: float = 60) -> tuple[str, set[str]]:
    """Start ``stitch bench ARGS --out RUN_DIR``, press Ctrl-C once two tasks finished: its stdout and
    the tasks with a result on disk, after checking it stopped as an interrupted run does."""
    proc = _cli([*args, "--out", str(run_dir)], env)
    results = run_dir / "results"
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and len(list(results.glob("*.json"))) < 2:
        time.sleep(0.1)
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=timeout_s)
    assert proc.returncode == 130, f"rc {proc.returncode}\nstdout:\n{stdout}\nstderr:\n{stderr}"
    assert "--resume" in stderr and "not run (interrupted)" in stdout
    return stdout, {p.stem for p in results.glob("*.json")}


def test_cli_ctrl_c_keeps_finished_results_and_resume_completes(tmp_path, log):
    names = [f"pw_slow{i}_fp32" for i in range(8)]
    suite = make_suite(tmp_path, names)
    hold = tmp_path / "hold"  # the third task on waits while it exists: Ctrl-C lands with six not finished
    hold.write_text("")
    env = {**os.environ, "PYTHONPATH": str(REPO), "CUDA_VISIBLE_DEVICES": "0", "HOME": str(tmp_path),
           "STITCH_FAKE_BENCH_SLOW_S": "0.5", "STITCH_FAKE_BENCH_HOLD": str(hold)}
    run_dir = tmp_path / "cli-run"
    _, done = ctrl_c_after_two([str(suite), "--backend", BACKEND, "--no-bandwidth"], env, run_dir)
    assert done == {"pw_slow0_fp32", "pw_slow1_fp32"}
    hold.unlink()

    report_path = tmp_path / "report.json"
    proc = _cli([str(suite), "--out", str(run_dir), "--resume", "--backend", BACKEND, "--no-bandwidth",
                 "--json", str(report_path)], env)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 0, stderr
    report = json.loads(report_path.read_text())
    assert [r["name"] for r in report["results"]] == names
    assert report["summary"]["correct"] == 8
    assert len(log()) <= 8 + 1  # at most the one interrupted task ran twice
    assert "geometric-mean speedup over 8 correct tasks" in stdout


def test_cli_errors_are_clear(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(REPO), "HOME": str(tmp_path)}
    proc = _cli([str(tmp_path / "missing")], env)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 2 and "not a directory" in stderr
    (tmp_path / "empty").mkdir()
    proc = _cli([str(tmp_path / "empty")], env)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 2 and "no KernelBench tasks" in stderr


def test_gpu_slots_come_from_the_environment():
    from stitch_lsp.benchsuite.gpus import slots, visible_gpus

    assert visible_gpus({"CUDA_VISIBLE_DEVICES": "2,3"}) == ["2", "3"]
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": ""}) == []
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": "-1"}) == []
    assert slots(1, {"CUDA_VISIBLE_DEVICES": "2,3"}) == ["2"]
    assert slots(None, {"CUDA_VISIBLE_DEVICES": ""}) == ["cpu"]


def test_no_gpu_is_said_up_front(tmp_path, log, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    suite = make_suite(tmp_path, ["pw_a_fp32"])
    out = io.StringIO()
    report = run_bench(options(tmp_path, suite), Settings(), out=out)
    assert "warning: no GPU visible" in out.getvalue()
    assert report.results[0].gpu == "cpu"


def test_resume_can_rerun_chosen_statuses(tmp_path, log, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    suite = make_suite(tmp_path, ["pw_a_fp32", "red_wrong_fp32"])
    run_bench(options(tmp_path, suite), Settings(), out=io.StringIO())
    before = len(log())
    report = run_bench(options(tmp_path, suite, resume=True, rerun=["incorrect"]), Settings(), out=io.StringIO())
    assert [row[0] for row in log()[before:]] == ["red_wrong_fp32"]
    assert len(report.results) == 2


def test_cli_lists_without_running(tmp_path, log):
    suite = make_suite(tmp_path, ["pw_a_fp32", "norm_b_fp32", "red_c_bf16"])
    env = {**os.environ, "PYTHONPATH": str(REPO), "HOME": str(tmp_path)}
    proc = _cli([str(suite), "--list", "--levels", "1"], env)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 0, stderr
    assert "pw_a_fp32" in stdout and "red_c_bf16" in stdout and "norm_b_fp32" not in stdout
    assert "2 of 3 tasks" in stdout
    assert log() == [] and not (tmp_path / ".stitch").exists()
    proc = _cli([str(suite), "--rerun", "incorrect"], env)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 2 and "--rerun goes with --resume" in stderr
