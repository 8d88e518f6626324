"""The torch.compile baseline's mode: one setting, checked, carried to the worker and into the cache key."""

from __future__ import annotations

import json

from stitch_lsp.settings import Settings, merge
from tests.jobs.test_kernel_checks_e2e import workspace
from tests.verify.test_no_cache_layers import reached, verify_kernel


def test_the_setting_takes_the_two_modes_and_ignores_anything_else():
    s, ignored = merge(Settings(), {"compileMode": "max-autotune-no-cudagraphs"})
    assert s.compile_mode == "max-autotune-no-cudagraphs" and not ignored
    s, ignored = merge(Settings(), {"compileMode": "reduce-overhead"})  # CUDA graphs: shared static buffers
    assert s.compile_mode == "default" and ignored == ["compile_mode"]


def test_the_mode_reaches_the_worker_and_a_new_mode_is_a_new_question(tmp_path):
    workspace(tmp_path)
    log = tmp_path / "pool.jsonl"
    (tmp_path / "pyproject.toml").write_text("")
    assert verify_kernel(tmp_path, log).returncode == 0
    (tmp_path / "pyproject.toml").write_text('[tool.stitch]\ncompileMode = "max-autotune-no-cudagraphs"\n')
    out = verify_kernel(tmp_path, log, "--json")
    [entry] = json.loads(out.stdout)
    assert entry["cached"] is False  # not answered with the default mode's verdict
    assert [c["compile_mode"] for c in reached(log)] == ["default", "max-autotune-no-cudagraphs"]
