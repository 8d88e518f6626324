"""``stitch bench --cluster``: whole runs on a local Ray cluster of two nodes with two fake GPUs each,
through the real actors and shard processes and the stand-in backend (no GPU).

One cluster serves the whole module (Ray takes seconds to start); each run connects to it
as its own job, as the CLI does."""

from __future__ import annotations

import io
import os
from pathlib import Path

import pytest

from stitch_lsp.benchsuite.executor import LocalExecutor
from stitch_lsp.benchsuite.suite import BenchError, BenchOptions, run_bench
from stitch_lsp.benchsuite.table import render, render_rows, render_summary
from stitch_lsp.serde import to_dict
from stitch_lsp.settings import Settings

from tests.bench.test_suite_run import BACKEND, REPO, ctrl_c_after_two, make_suite

ray = pytest.importorskip("ray", reason="the cluster extra is not installed: pip install 'stitch-lsp[cluster]'")
from ray.cluster_utils import Cluster  # noqa: E402

NAMES = ["norm_a_fp32", "pw_b_fp32", "pw_slow1_fp32", "red_c_fp32", "red_wrong_fp32", "pw_slow2_fp32"]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """Two nodes of two GPUs each; the stand-in's knobs are set before the nodes start, so every
    worker process on them sees them."""
    shared = tmp_path_factory.mktemp("ray-shared")
    knobs = {"RAY_AUTH_MODE": "disabled", "STITCH_FAKE_BENCH_LOG": str(shared / "runs.log"), "STITCH_FAKE_BENCH_SLOW_S": "0.5",
             "STITCH_FAKE_BENCH_DIE_ONCE": str(shared / "died"), "STITCH_FAKE_BENCH_VERIFY_S": "0.5",
             "STITCH_FAKE_BENCH_HOLD": str(shared / "hold")}
    saved = {k: os.environ.get(k) for k in knobs}
    os.environ.update(knobs)
    head = Cluster(initialize_head=True, connect=False,
                   head_node_args={"num_cpus": 2, "num_gpus": 2, "include_dashboard": False})
    head.add_node(num_cpus=2, num_gpus=2)
    head.wait_for_nodes()
    head.knobs = knobs
    try:
        yield head
    finally:
        head.shutdown()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@pytest.fixture
def runs(cluster):
    """The stand-in's execution log, emptied for this test: one (task, CUDA_VISIBLE_DEVICES, pid) per run."""
    log = Path(cluster.knobs["STITCH_FAKE_BENCH_LOG"])
    log.write_text("")
    Path(cluster.knobs["STITCH_FAKE_BENCH_DIE_ONCE"]).unlink(missing_ok=True)
    return lambda: [line.split() for line in log.read_text().splitlines()]


def options(tmp_path, suite, cluster=None, run="run", **kw) -> BenchOptions:
    return BenchOptions(tasks_dir=suite, run_dir=tmp_path / run, backend=BACKEND, command="test", cluster=cluster,
                        **kw)


def test_every_task_runs_once_and_the_report_matches_the_local_executor(tmp_path, cluster, runs, monkeypatch):
    suite = make_suite(tmp_path, NAMES)
    out = io.StringIO()
    report = run_bench(options(tmp_path, suite, cluster.address), Settings(), out=out)

    assert sorted(row[0] for row in runs()) == sorted(NAMES)  # each exactly once
    assert [r.name for r in report.results] == sorted(NAMES) and not report.not_run
    assert "4 GPUs on 2 nodes" in report.run.executor and len(report.run.gpus) == 4
    slots = {r.gpu for r in report.results}
    assert len(slots) >= 2 and all(":" in s for s in slots)  # NODE:GPU, spread over the cluster
    assert {row[1] for row in runs()} <= {"0", "1"}  # each shard saw only the GPU Ray granted its actor
    assert not any(r.retried for r in report.results)
    text = (tmp_path / "run" / "table.txt").read_text()
    assert "on ray " in text.splitlines()[0]
    logs = "".join(p.read_text() for p in (tmp_path / "run" / "logs").glob("shard-*.log"))
    assert all(f"stand-in running {name}" in logs for name in NAMES)  # each node's shard log came back here

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    local = run_bench(options(tmp_path, suite, run="local"), Settings(), out=io.StringIO(), executor=LocalExecutor())
    assert local.run.executor == "local"
    assert render_rows(report.results, 3000.0) == render_rows(local.results, 3000.0)
    assert render_summary(report.summary) == render_summary(local.summary)
    strip = ("gpu", "seconds", "steps")  # where the time went differs run to run
    assert ([{k: v for k, v in to_dict(r).items() if k not in strip} for r in report.results]
            == [{k: v for k, v in to_dict(r).items() if k not in strip} for r in local.results])


def test_a_task_whose_actor_dies_runs_again_elsewhere_and_is_marked(tmp_path, cluster, runs):
    names = ["pw_a_fp32", "pw_die_fp32", "red_b_fp32", "norm_c_fp32"]
    suite = make_suite(tmp_path, names)
    out = io.StringIO()
    report = run_bench(options(tmp_path, suite, cluster.address, gpus=2, measure_bandwidth=False), Settings(),
                       out=out)

    ran = [row[0] for row in runs()]
    assert sorted(ran) == sorted(names + ["pw_die_fp32"])  # the lost one twice, the others once
    died = next(r for r in report.results if r.name == "pw_die_fp32")
    assert died.correct and len(died.retried) == 1 and "died" in died.retried[0]
    assert all(not r.retried for r in report.results if r.name != "pw_die_fp32")
    assert "lost while running pw_die_fp32" in out.getvalue() and "ran 2 times" in out.getvalue()
    assert "warning: worker" not in out.getvalue()  # replaced, or the run ended before it had to be
    assert "ran again after losing its worker: 1: pw_die_fp32" in render(report)
    assert report.summary.correct == 4 and not report.not_run


def test_ctrl_c_keeps_the_finished_tasks_and_resume_runs_only_the_rest(tmp_path, cluster, runs):
    names = [f"pw_slow{i}_fp32" for i in range(6)]
    suite = make_suite(tmp_path, names)
    hold = Path(cluster.knobs["STITCH_FAKE_BENCH_HOLD"])  # the third task on waits while it exists
    hold.write_text("")
    env = {**os.environ, "PYTHONPATH": str(REPO), "HOME": str(tmp_path), "RAY_ADDRESS": cluster.address}
    try:
        stdout, done = ctrl_c_after_two([str(suite), "--backend", BACKEND, "--no-bandwidth", "--gpus", "2",
                                         "--cluster"], env, tmp_path / "run", timeout_s=90)
    finally:
        hold.unlink()
    assert done == {"pw_slow0_fp32", "pw_slow1_fp32"} and "on ray " in stdout

    before = len(runs())
    second = run_bench(options(tmp_path, suite, cluster.address, gpus=2, measure_bandwidth=False, resume=True,
                               coder="auto"), Settings(), out=io.StringIO())  # the CLI's default coder
    assert sorted(row[0] for row in runs()[before:]) == sorted(set(names) - done)  # the finished ones skipped
    assert [r.name for r in second.results] == names and not second.not_run and second.summary.correct == 6


def test_workers_on_another_torch_are_refused(tmp_path, cluster, runs, monkeypatch):
    from stitch_lsp.benchsuite import ray_executor, versions

    here = versions.local_versions()
    monkeypatch.setattr(ray_executor, "local_versions", lambda: versions.Versions(
        stitch=here.stitch, stitch_source=here.stitch_source, torch="2.99.0", python=here.python,
        where="this machine"))
    suite = make_suite(tmp_path, ["pw_a_fp32"])
    with pytest.raises(BenchError) as refused:
        run_bench(options(tmp_path, suite, cluster.address, gpus=1), Settings(), out=io.StringIO())
    message = str(refused.value)
    assert f"torch {here.torch} where this machine runs 2.99.0" in message
    assert "Install the same torch release on every node" in message
    assert runs() == [] and not (tmp_path / "run" / "results").exists()


def test_llm_candidates_of_a_round_are_verified_at_once_on_the_cluster(tmp_path, cluster, runs):
    from stitch_lsp.coders.llm.coder import LlmCoder
    from stitch_lsp.coders.llm.key import Secret
    from stitch_lsp.benchsuite.candidate_pool import CandidatePool
    from stitch_lsp.benchsuite.executor import WorkerSpec
    from stitch_lsp.benchsuite.ray_executor import RayExecutor
    from stitch_lsp.pipeline import Task, TensorSpec
    from stitch_lsp.verdict import VerdictStatus
    from tests.llm.candidates import MODULE, reply
    from tests.llm.conftest import FAKE_KEY, REFERENCE, config_for
    from tests.llm.fake_messages_api import FakeMessagesAPI, Reply

    settings = Settings(rounds=2, candidates_per_round=3, target_speedup=2.0)
    executor = RayExecutor(cluster.address, gpus=3)
    pool = CandidatePool(executor.start(WorkerSpec(coder="llm", settings=settings, run_dir=tmp_path / "fuse",
                                                   backend=BACKEND), 3, io.StringIO()), executor)
    answers = [Reply(reply(module=MODULE + f"# fake: {kind}\n")) for kind in ("compile_error", "correct 1.4", "correct 2.5")]
    task = Task(name="relu_scale", source=REFERENCE, inputs=[TensorSpec((4096, 1024))], shape_source="get_inputs")
    try:
        assert pool.slots == 3
        with FakeMessagesAPI(answers, api_key=FAKE_KEY) as api:
            outcome = LlmCoder(settings, verifier=pool, api_key=Secret(FAKE_KEY), config=config_for(api)).run(task, None)
        verified = [row for row in runs() if row[0] == "verify"]
        # An actor lost between rounds: the next candidate sent to it goes to a fresh actor instead.
        workers = list(pool._workers)
        for worker in workers:
            ray.kill(worker.actor)
        again = pool.verify(REFERENCE, outcome.candidate)
        assert again.status is VerdictStatus.CORRECT and pool.slots == 3
    finally:
        pool.close()
    assert outcome.ok and outcome.verdict.timing.speedup_vs_eager == 2.5 and len(outcome.rounds) == 1
    assert "fake: correct 2.5" in outcome.candidate.module_source
    assert len(verified) == 3 and len({row[2] for row in verified}) == 3  # three GPUs' shard processes
    starts, ends = [float(row[3]) for row in verified], [float(row[4]) for row in verified]
    assert max(starts) < min(ends)  # all three ran at the same time
