"""Listing a suite reads files statically: no imports, no torch, bad files skipped with a reason."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from stitch_lsp.benchsuite.tasks import TaskFileError, TaskFilter, discover, read_task, select

SUITE = Path(__file__).resolve().parents[2] / "bench" / "tasks"


def test_our_suite_is_listed_with_levels_tags_and_index():
    tasks, skipped = discover(SUITE)
    assert skipped == []
    assert len(tasks) >= 30
    rms = next(t for t in tasks if t.name == "norm_rmsnorm_bf16")
    assert rms.level == 1 and "rmsnorm" in rms.tags and rms.dtype == "bfloat16"
    assert rms.expected_bound == "memory" and rms.min_bytes and rms.min_bytes > 100_000_000
    gemm = next(t for t in tasks if t.name == "gemm_linear_bias_gelu_fp32")
    assert gemm.expected_bound == "compute" and gemm.flops == 2 * 2048 * 4096 * 4096
    assert all(t.path.endswith(".py") for t in tasks)


def test_listing_does_not_import_torch():
    import subprocess

    code = ("import sys; from pathlib import Path; from stitch_lsp.benchsuite.tasks import discover; "
            f"discover(Path({str(SUITE)!r})); import stitch_lsp.commands.bench; print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env={"PYTHONPATH": str(SUITE.parents[1])})
    assert out.stdout.strip() == "False", out.stderr


def test_filters():
    tasks, _ = discover(SUITE)
    bf16_norms = select(tasks, TaskFilter(tags=["norm", "bf16"]))
    assert bf16_norms and all("norm" in t.tags and t.name.endswith("_bf16") for t in bf16_norms)
    assert "gemm_layernorm_linear_bf16" in {t.name for t in bf16_norms}  # a tag, not only the prefix
    level1 = select(tasks, TaskFilter(levels=[1]))
    assert level1 and all(t.level == 1 for t in level1)
    globbed = select(tasks, TaskFilter(globs=["red_*", "pw_swiglu_*"]))
    assert {t.category for t in globbed} == {"red", "pw"}
    assert select(tasks, TaskFilter(tags=["no-such-tag"])) == []


def test_bad_files(tmp_path):
    (tmp_path / "broken.py").write_text("def get_inputs(:\n")
    (tmp_path / "half.py").write_text("class Model: pass\ndef get_inputs(): return []\n")
    level3 = tmp_path / "level3"
    level3.mkdir()
    (level3 / "1_MLP.py").write_text("class Model: pass\ndef get_inputs(): return []\ndef get_init_inputs(): return []\n")
    tasks, skipped = discover(tmp_path)
    assert [t.name for t in tasks] == ["1_MLP"] and tasks[0].level == 3  # KernelBench's levelN directories
    assert any("not valid Python" in s for s in skipped)
    assert any("no get_init_inputs" in s for s in skipped)
    with pytest.raises(TaskFileError):
        read_task(tmp_path / "half.py")
    with pytest.raises(TaskFileError, match="not a directory"):
        discover(tmp_path / "nope")
