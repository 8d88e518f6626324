"""The torch.compile baseline's mode: one setting, checked, carried to the worker and into the cache key."""

from __future__ import annotations

import json

from stitch_lsp.settings import Layer, read_settings
from tests.jobs.test_kernel_checks_e2e import workspace
from tests.verify.test_no_cache_layers import reached, verify_kernel


def _read(mode: str):
    return read_settings([Layer("pyproject.toml", {"compileMode": mode}, workspace=True)], root=None, trusted=True)


def test_the_setting_takes_the_two_modes_and_ignores_anything_else():
    built = _read("max-autotune-no-cudagraphs")
    assert built.settings.compile_mode == "max-autotune-no-cudagraphs" and not built.unknown
    built = _read("reduce-overhead")  # CUDA graphs: shared static buffers
    assert built.settings.compile_mode == "default"
    assert [key for _layer, key in built.unknown] and "compileMode" in built.unknown[0][1]


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
