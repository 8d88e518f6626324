"""The classification itself: every setting has a place, and the nvcc flag screen keeps only harmless flags."""

from __future__ import annotations

from pathlib import Path

import attrs
import pytest

from stitch_lsp.settings import Layer, Settings, read_settings as build
from stitch_lsp.workspace_trust import CLASSIFICATION, USER_ONLY, inside_workspace, screen, screen_flags


def test_every_setting_is_classified():
    """A new setting must be placed: safe from the workspace, user-only, or checked."""
    assert set(CLASSIFICATION) == {f.name for f in attrs.fields(Settings)}


@pytest.mark.parametrize("flags, kept", [
    (["-O3", "-lineinfo", "--use_fast_math", "-std=c++17", "-DN=4", "-UDEBUG", "--expt-relaxed-constexpr"],
     ["-O3", "-lineinfo", "--use_fast_math", "-std=c++17", "-DN=4", "-UDEBUG", "--expt-relaxed-constexpr"]),
    (["-Xptxas", "-v,-warn-spills"], ["-Xptxas", "-v,-warn-spills"]),
    (["-Xptxas=-O3"], ["-Xptxas=-O3"]),
    (["-D", "TILE=32", "-maxrregcount", "64", "-arch=sm_90a", "-gencode=arch=compute_90,code=sm_90"],
     ["-D", "TILE=32", "-maxrregcount", "64", "-arch=sm_90a", "-gencode=arch=compute_90,code=sm_90"]),
    (["-ccbin", "/tmp/evil"], []),
    (["-ccbin=/tmp/evil", "--compiler-bindir=/tmp/evil"], []),
    (["-Xcompiler", "-fplugin=/tmp/p.so", "-O2"], ["-O2"]),
    (["-Xcompiler=-B/tmp/evil"], []),
    (["--compiler-options", "-wrapper,/tmp/evil"], []),
    (["-Xptxas", "--options-file=/tmp/x"], []),
    (["-Xlinker", "--plugin=/tmp/p.so", "-Xnvlink", "x", "-Xcudafe", "y"], []),
    (["-run", "--run-args", "x", "-optf", "f.txt", "--options-file=f.txt"], []),
    (["-o", "/home/u/.bashrc", "-MF", "/tmp/deps", "--keep-dir", "/tmp/k", "-keep", "-save-temps"], []),
    (["-I/usr/include/evil", "-I", "inc", "-Iinc"], ["-I", "inc", "-Iinc"]),
    (["-L/tmp", "-lcrypto", "-include", "/tmp/x.h"], []),
    (["-D", "X; rm -rf ~"], []),
    (["--some-future-flag"], []),
])
def test_flag_screen(tmp_path, flags, kept):
    (tmp_path / "inc").mkdir()
    got, dropped = screen_flags(flags, inside_workspace(tmp_path))
    assert got == kept
    assert all(reason for _, reason in dropped)
    assert sum(len(d.split(" ")) for d, _ in dropped) + len(got) >= len(flags) - 1  # nothing silently lost


def test_paths_outside_the_workspace(tmp_path):
    inside = inside_workspace(tmp_path)
    (tmp_path / "sub").mkdir()
    (tmp_path / "link").symlink_to("/usr")
    assert inside("sub") and inside(str(tmp_path / "sub")) and inside(".")
    assert not inside("..") and not inside("../x") and not inside("/usr/include") and not inside("~")
    assert not inside("link/include")  # a symlink out of the workspace is outside
    assert not inside_workspace(None)("sub")


def test_screen_reports_each_dropped_value(tmp_path):
    raw = {"nvcc_path": "./evil", "python": "/bin/sh", "arch": "sm_90 -ccbin x", "kernels_dir": "/etc",
           "compile_timeout_s": 5, "pair": [{"kernel": "a.cu:k", "reference": "ref.py"},
                                            {"kernel": "a.cu:k", "reference": "/etc/ref.py"}]}
    kept, ignored = screen(raw, tmp_path, "pyproject.toml")
    assert kept == {"compile_timeout_s": 5, "pair": [{"kernel": "a.cu:k", "reference": "ref.py"}]}
    assert {i.key for i in ignored} == {"nvcc_path", "python", "arch", "kernels_dir", "pair"}
    assert all(i.source == "pyproject.toml" and i.reason for i in ignored)


def test_build_keeps_user_values_and_screens_only_workspace_layers(tmp_path):
    layers = [
        Layer("user config", {"nvccPath": "/opt/cuda/bin/nvcc", "extraFlags": ["-ccbin", "/usr/bin/g++"]}, False),
        Layer("pyproject.toml", {"tool": 1, "nvccPath": "./evil", "arch": "sm_80", "trusted": True}, True),
    ]
    untrusted = build(layers, root=tmp_path, trusted=False)
    assert untrusted.settings.nvcc_path == "/opt/cuda/bin/nvcc" and untrusted.settings.arch == "sm_80"
    assert untrusted.settings.extra_flags == ["-ccbin", "/usr/bin/g++"] and untrusted.settings.trusted is False
    assert [i.key for i in untrusted.untrusted] == ["nvcc_path"]
    assert ("pyproject.toml", "tool") in untrusted.unknown
    trusted = build(layers, root=tmp_path, trusted=True)
    assert trusted.settings.nvcc_path == "./evil" and trusted.untrusted == [] and trusted.settings.trusted is True


def test_user_only_settings_name_programs():
    assert {k for k, (kind, _) in CLASSIFICATION.items() if kind == USER_ONLY} == {"nvcc_path", "python", "record_command",
                                                                                   "extra_env", "trusted"}


def test_shape_names_are_kept_as_written():
    """Setting names are camelCase or snake_case; the variable names in `shapes` are the user's own."""
    built = build([Layer("workspace/configuration", {"stitch": {"shapes": {"hiddenStates": "8x1024 float32"},
                                                                "onSave": {"compile": False}}}, True, True)],
                  root=None, trusted=False)
    assert built.settings.shapes == {"hiddenStates": "8x1024 float32"}
    assert built.settings.on_save.compile is False
