"""The executor choice without a cluster: versions compared, addresses resolved, clear refusals."""

from __future__ import annotations

import io
import sys

import pytest

from stitch_lsp.benchsuite.executor import ExecutorError, LocalExecutor
from stitch_lsp.benchsuite.suite import make_executor
from stitch_lsp.benchsuite.suite import BenchError, BenchOptions, run_bench
from stitch_lsp.benchsuite.versions import Versions, mismatches
from stitch_lsp.settings import Settings
from tests.bench.test_suite_run import BACKEND, make_suite


def here(**kw) -> Versions:
    base = dict(stitch="0.1.0", stitch_source="abc123", torch="2.11.0+cu130", python="3.12", where="this machine")
    return Versions(**{**base, **kw})


def test_matching_workers_pass_and_a_build_tag_is_not_a_difference():
    workers = [here(where="10.0.0.5:0"), here(where="10.0.0.6:1", torch="2.11.0+cpu")]
    assert mismatches(here(), workers) == []


def test_each_difference_is_named_with_the_worker():
    problems = mismatches(here(), [here(where="10.0.0.5:0", torch="2.10.0+cu128"),
                                   here(where="10.0.0.6:0", stitch_source="fff000", python="3.11"),
                                   here(where="10.0.0.7:0", torch="")])
    assert problems == [
        "10.0.0.5:0: torch 2.10.0+cu128 where this machine runs 2.11.0+cu130",
        "10.0.0.6:0: Stitch 0.1.0 (source fff000) where this machine runs 0.1.0 (source abc123); "
        "Python 3.11 where this machine runs 3.12",
        "10.0.0.7:0: no torch installed (2.11.0+cu130 on this machine)",
    ]


def test_without_torch_here_the_workers_must_agree_with_each_other():
    driver = here(torch="")
    assert mismatches(driver, [here(where="a:0"), here(where="b:0")]) == []
    assert mismatches(driver, [here(where="a:0"), here(where="b:0", torch="2.9.1")]) == [
        "b:0: torch 2.9.1 where a:0 runs 2.11.0+cu130"]


def test_the_local_executor_is_the_default():
    assert isinstance(make_executor(None), LocalExecutor)


def test_a_cluster_run_without_ray_installed_says_how_to_get_it(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray -> ImportError
    suite = make_suite(tmp_path, ["pw_a_fp32"])
    options = BenchOptions(tasks_dir=suite, run_dir=tmp_path / "run", backend=BACKEND, cluster="ray://head:10001")
    with pytest.raises(BenchError, match=r"needs Ray, which is not installed here: pip install 'stitch-lsp\[cluster\]'"):
        run_bench(options, Settings(), out=io.StringIO())
    assert not (tmp_path / "run" / "run.json").exists()


def test_cluster_without_an_address_needs_ray_address(tmp_path, monkeypatch, capsys):
    pytest.importorskip("ray")
    from stitch_lsp.cli import main

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    suite = make_suite(tmp_path, ["pw_a_fp32"])
    assert main(["bench", str(suite), "--out", str(tmp_path / "run"), "--backend", BACKEND, "--cluster"]) == 2
    err = capsys.readouterr().err
    assert "--cluster without an address needs RAY_ADDRESS" in err


def test_an_unreachable_cluster_is_a_clear_error(tmp_path):
    pytest.importorskip("ray")
    from stitch_lsp.benchsuite.executor import WorkerSpec
    from stitch_lsp.benchsuite.ray_executor import RayExecutor

    executor = RayExecutor("127.0.0.1:1")  # nothing listens there
    with pytest.raises(ExecutorError, match=r"nothing answers at 127.0.0.1:1 .*ray start --head"):
        executor.start(WorkerSpec(coder="template", settings=Settings(), run_dir=tmp_path), 1, io.StringIO())
    executor.close()
