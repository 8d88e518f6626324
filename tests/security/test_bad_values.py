"""Bad values: numbers out of range, flags nvcc reads differently from the screen, commands that die,
`// stitch:` comments that try to run code, paths that leave the workspace. Each becomes a message,
never a traceback, and runs nothing. (The report: compileTimeoutS = 1e9 crashed `stitch check` with
OverflowError and silently stopped on-save compiles; `stitch fuse` printed a WorkerDied traceback;
-Werror swallowed the next flag.)"""

from __future__ import annotations

import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from stitch_lsp import cli
from stitch_lsp.nvcc_options import known, table, takes_value
from stitch_lsp.settings import NUMBER_RANGES, Layer, read_settings
from stitch_lsp.verify.worker_pool import WorkerDied
from stitch_lsp.workspace_trust import camel, inside_workspace, screen_flags
from tests.lsp.harness import open_doc, running_server, server_env, server_info
from tests.security.test_workspace_trust import KERNEL, save_and_wait, user_nvcc


@pytest.mark.parametrize("key", sorted(NUMBER_RANGES))
@pytest.mark.parametrize("value", [1e9, -5, float("inf"), float("nan"), 10**30])
def test_every_number_is_clamped_and_said(key, value):
    built = read_settings([Layer("pyproject.toml", {camel(key): value}, True)], root=None, trusted=True)
    low, high = NUMBER_RANGES[key]
    got = getattr(built.settings, key)
    assert low <= got <= high and not (isinstance(got, float) and math.isnan(got))
    assert len(built.problems) == 1 and camel(key) in built.problems[0] and "pyproject.toml" in built.problems[0]


def test_a_number_in_range_is_kept_silently():
    built = read_settings([Layer("pyproject.toml", {"compileTimeoutS": 30}, True)], root=None, trusted=False)
    assert built.settings.compile_timeout_s == 30 and built.problems == []


def _cli(cwd: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    full = server_env({"STITCH_CONFIG": os.devnull, "XDG_CACHE_HOME": str(cwd / ".cache"), **(env or {})})
    return subprocess.run([sys.executable, "-m", "stitch_lsp.cli", *args], cwd=cwd, env=full, capture_output=True,
                          text=True, timeout=180)


def test_cli_compile_timeout_1e9_is_a_message_and_compiles_go_on(tmp_path):
    (tmp_path / "pyproject.toml").write_text("[tool.stitch]\ncompileTimeoutS = 1e9\n")
    (tmp_path / "k.cu").write_text(KERNEL)
    argv_log = tmp_path / "argv"
    nvcc = user_nvcc(tmp_path, argv_log)
    out = _cli(tmp_path, "check", "k.cu", "--nvcc", str(nvcc))
    assert "Traceback" not in out.stderr and out.returncode == 0, out.stderr
    assert "compileTimeoutS = 1e+09 (from pyproject.toml) is out of range" in out.stderr
    assert argv_log.exists()  # nvcc ran, under the clamped timeout
    out = _cli(tmp_path, "check", "k.cu", "--nvcc", str(nvcc), "--timeout", "1e12")
    assert "Traceback" not in out.stderr and "compileTimeoutS = 1e+12 (from the command line)" in out.stderr


async def test_server_compile_timeout_1e9_is_a_message_and_on_save_compiles_go_on(tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "pyproject.toml").write_text("[tool.stitch]\ncompileTimeoutS = 1e9\n")
    (ws / "k.cu").write_text(KERNEL)
    argv_log = tmp_path / "argv"
    config = tmp_path / "config.toml"
    config.write_text(f'nvccPath = "{user_nvcc(tmp_path, argv_log)}"\n')
    async with running_server(ws, env={"STITCH_CONFIG": str(config)}) as client:
        uri = open_doc(client, ws / "k.cu")
        await save_and_wait(client, uri, argv_log)  # the compile on save happened
        said = [m.message for m in client.messages if "compileTimeoutS" in m.message]
        assert len(said) == 1 and "out of range" in said[0]
        assert (await server_info(client))["settings"]["compile_timeout_s"] == 3600


def test_any_exception_in_a_command_is_one_line(monkeypatch, tmp_path, capsys):
    """A dying worker in `stitch fuse` (or any bug) is one line and an exit status; the traceback is logged."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))

    def dies(_args):
        raise WorkerDied("crashed", "the worker exited with SIGKILL (killed) during tracing")

    from stitch_lsp.commands import fuse

    monkeypatch.setattr(fuse, "run", dies)
    code = cli.main(["fuse", "m.py:1-2"])
    err = capsys.readouterr().err
    assert code == 1 and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert err.startswith("stitch fuse: the worker process died: the worker exited with SIGKILL")
    assert "Traceback" in (tmp_path / "stitch" / "cli.log").read_text()


def test_fuse_with_a_malformed_comment_prints_no_traceback(tmp_path):
    (tmp_path / "m.py").write_text(
        "import torch\n\n\nclass M(torch.nn.Module):\n    def __init__(self, config):\n        super().__init__()\n"
        "        self.fc = torch.nn.Linear(config.n_embd, config.n_embd)\n\n    def forward(self, x):\n"
        "        # stitch: config=1024, x=[8,config.n_embd] float32\n        h = self.fc(x)\n"
        "        return torch.relu(h) * 2\n")
    out = _cli(tmp_path, "fuse", "m.py:11-12")
    assert "Traceback" not in out.stdout + out.stderr and out.returncode != 0
    assert out.stderr.strip().splitlines()[-1].startswith("stitch fuse:")


# -- nvcc's own option table -------------------------------------------------------------------------
def test_the_option_table_is_nvccs():
    assert takes_value("-Werror") and takes_value("--Werror") and takes_value("-ccbin") and takes_value("-o")
    assert not takes_value("-lineinfo") and not takes_value("-Wreorder") and not takes_value("-keep")
    assert known("-Xptxas") and known("--options-file") and not known("--made-up")
    assert len({o.long for o in table().values()}) > 130


@pytest.mark.parametrize("flags, kept", [
    (["-Werror", "-O3"], []),  # nvcc reads -Werror=-O3: an error, never "two harmless flags"
    (["-Werror", "all-warnings", "-O3"], ["-Werror", "all-warnings", "-O3"]),
    (["-Werror", "-ccbin", "/tmp/evil"], []),
    (["-maxrregcount", "-ccbin=/tmp/evil"], []),
    (["-std", "c++17", "-lineinfo"], ["-std", "c++17", "-lineinfo"]),
])
def test_flags_are_split_as_nvcc_splits_them(tmp_path, flags, kept):
    got, dropped = screen_flags(flags, inside_workspace(tmp_path))
    assert got == kept and all(reason for _, reason in dropped)


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc on PATH")
@pytest.mark.parametrize("flags", [["-Werror", "all-warnings", "-O3"], ["-std", "c++17", "-lineinfo"]])
def test_what_the_screen_keeps_nvcc_accepts(tmp_path, flags):
    (tmp_path / "k.cu").write_text(KERNEL)
    kept, _ = screen_flags(flags, inside_workspace(tmp_path))
    out = subprocess.run(["nvcc", "-c", "k.cu", "-o", "k.o", *kept], cwd=tmp_path, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr


# -- `// stitch:` tricks and paths ----------------------------------------------------------------------
def test_grid_expression_cannot_call_anything(tmp_path):
    from stitch_lsp.analysis.cuda_analysis import analyze_cuda
    from stitch_lsp.jobs.pairing import pair_kernels

    marker = tmp_path / "RAN"
    text = (f"// stitch: reference=ref.py\n// stitch: grid=__import__('os').system('touch {marker}') block=32 "
            "args=y, x, 2.0, n\n" + KERNEL)
    (tmp_path / "ref.py").write_text("import torch\n\n\nclass Model(torch.nn.Module):\n    def forward(self, x):\n"
                                     "        return x * 2\n\n\ndef get_inputs():\n    return [torch.randn(32)]\n\n\n"
                                     "def get_init_inputs():\n    return []\n")
    path = tmp_path / "k.cu"
    path.write_text(text)
    kernels = [k for k in analyze_cuda(text, str(path)).kernels if k.body_range is not None]
    paired = pair_kernels(path, text.splitlines(), kernels, root=tmp_path, pyproject_pairs=[])
    assert not paired.pairs and any("__import__" in f.message for f in paired.findings)
    assert not marker.exists()


@pytest.mark.parametrize("outside", ["../x", "/etc", "~", "link/include", "sub/../../x"])
def test_paths_out_of_the_workspace_are_dropped_while_untrusted(tmp_path, outside):
    ws = tmp_path / "ws"
    (ws / "sub").mkdir(parents=True)
    (ws / "link").symlink_to("/usr")
    raw = {"includePaths": ["sub", outside], "kernelsDir": outside,
           "pair": [{"kernel": "k.cu:scale", "reference": outside + "/ref.py"}]}
    built = read_settings([Layer("pyproject.toml", raw, True)], root=ws, trusted=False)
    assert built.settings.include_paths == ["sub"] and built.settings.kernels_dir == "stitch_kernels"
    assert built.settings.pair == []
    assert {i.key for i in built.untrusted} == {"include_paths", "kernels_dir", "pair"}
