"""``--precision fp32|bf16|fp16``: tasks cast as KernelBench's harness casts them, and every row says so."""

from __future__ import annotations

import inspect
import json
import os
import subprocess
import sys
import types
from pathlib import Path

import pytest

from stitch_lsp.benchsuite.suite import BenchError, BenchOptions, run_bench
from stitch_lsp.task.precision import PrecisionError, cast_source, dtype_of, for_task, precision_of
from stitch_lsp.settings import Settings

REPO = Path(__file__).resolve().parents[2]
BACKEND = "tests.bench.fake_backend"

TASK = '''
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, n, classes):
        super(Model, self).__init__()
        self.lin = nn.Linear(n, classes)
        self.register_buffer("scale", torch.ones(classes))

    def forward(self, x, target):
        return nn.functional.cross_entropy(self.lin(x) * self.scale, target)

def get_inputs():
    return [torch.randn(4, 8), torch.randint(0, 3, (4,))]

def get_init_inputs():
    return [8, 3]
'''


def load(source: str) -> types.ModuleType:
    module = types.ModuleType("task")
    exec(compile(source, "task", "exec"), module.__dict__)
    return module


def test_fp32_is_the_task_as_written():
    assert cast_source(TASK, "fp32") == TASK
    assert precision_of(TASK) == "fp32"


def test_bf16_casts_parameters_buffers_and_floating_inputs_only():
    torch = pytest.importorskip("torch")
    source = cast_source(TASK, "bf16")
    assert precision_of(source) == "bf16" and cast_source(source, "bf16") == source
    task = load(source)
    model = task.Model(*task.get_init_inputs())
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}
    assert model.scale.dtype == torch.bfloat16
    x, target = task.get_inputs()
    assert x.dtype == torch.bfloat16 and target.dtype == torch.int64  # class indices stay integers
    assert model(x, target).dtype == torch.bfloat16
    # The signature stays the reference's (the Verifier and the generated binding read it).
    assert list(inspect.signature(task.Model).parameters) == ["n", "classes"]

    class ModelNew(task.Model):  # a generated candidate subclasses the reference's Model
        def __init__(self, n, classes):
            super().__init__(n, classes)

    assert ModelNew(8, 3).lin.weight.dtype == torch.bfloat16


def test_an_unknown_precision_is_refused_with_the_known_ones():
    with pytest.raises(PrecisionError, match="fp32, bf16, fp16"):
        dtype_of("fp8")


def test_a_recorded_selection_keeps_its_recorded_dtypes():
    assert for_task("bf16", "get_inputs") == ("bf16", "")
    chosen, note = for_task("bf16", "recorder", ["float32", "float32"])
    assert chosen == "fp32" and "--precision bf16 not applied" in note and "float32" in note


def test_the_bench_task_is_cast_and_a_bad_precision_stops_before_any_task(tmp_path):
    from stitch_lsp.benchsuite import runner
    from stitch_lsp.benchsuite.tasks import BenchTask

    path = tmp_path / "t.py"
    path.write_text(TASK)
    task = runner.pipeline_task(BenchTask(name="t", path=str(path)), "fp16")
    assert precision_of(task.source) == "fp16"
    with pytest.raises(PrecisionError):
        runner.configure(precision="fp64")


def test_a_run_and_its_rows_carry_the_precision_and_resume_keeps_it(tmp_path, monkeypatch):
    monkeypatch.setenv("STITCH_FAKE_BENCH_LOG", str(tmp_path / "log"))
    suite = tmp_path / "tasks"
    suite.mkdir()
    for name in ("pw_a_fp32", "pw_b_fp32"):
        (suite / f"{name}.py").write_text("class Model: pass\ndef get_inputs(): return []\n"
                                          "def get_init_inputs(): return []\n")
    options = BenchOptions(tasks_dir=suite, run_dir=tmp_path / "run", backend=BACKEND, command="test",
                           precision="bf16", measure_bandwidth=False)
    import io

    out = io.StringIO()
    report = run_bench(options, Settings(), out=out)
    assert report.run.precision == "bf16"
    assert [r.precision for r in report.results] == ["bf16", "bf16"]
    assert "precision bf16" in out.getvalue()
    saved = json.loads((tmp_path / "run" / "report.json").read_text())
    assert {row["precision"] for row in saved["results"]} == {"bf16"}
    again = BenchOptions(tasks_dir=suite, run_dir=tmp_path / "run", backend=BACKEND, command="test",
                         precision="fp32", resume=True, measure_bandwidth=False)
    with pytest.raises(BenchError, match="--precision bf16"):
        run_bench(again, Settings(), out=io.StringIO())


def test_stitch_verify_runs_both_models_in_fp16(tmp_path):
    pytest.importorskip("torch")
    corpus = REPO / "tests" / "verify" / "corpus" / "cpu"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run(
        [sys.executable, "-m", "stitch_lsp.cli", "verify", str(corpus / "ref_relu_scale.py"),
         str(corpus / "honest_numpy.py"), "--device", "cpu", "--json", "--workdir", str(tmp_path / "work"),
         "--no-timing", "--precision", "fp16"],
        capture_output=True, text=True, env=env, timeout=300)
    verdict = json.loads(proc.stdout)
    assert verdict["status"] == "correct", verdict["summary"]
    assert verdict["correctness"]["dtype"] == "float16"
    assert verdict["correctness"]["rtol"] == pytest.approx(1e-2)


def test_a_selection_recorded_by_stitch_record_keeps_its_dtypes():
    where = "recorded (.stitch/recordings/model.py/Block.forward.json, line 104)"
    chosen, note = for_task("fp16", where, ["float32"])
    assert chosen == "fp32" and "not applied" in note
    assert for_task("fp16", where + ",comment") == ("fp16", "")
