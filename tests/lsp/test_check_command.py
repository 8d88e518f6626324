"""``stitch check``: the editor's findings in a terminal, as text or JSON, with exit codes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.lsp.harness import REPO, server_env
from tests.lsp.test_rules_and_bad_input import PLANTED


def stitch(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "stitch_lsp.cli", *args],
        capture_output=True, text=True, cwd=cwd, env=server_env(), timeout=300,
    )


def test_rules_without_compiling(tmp_path):
    (tmp_path / "planted.cu").write_text(PLANTED)
    out = stitch("check", "planted.cu", "--no-compile", cwd=tmp_path)
    assert out.returncode == 0, out.stderr  # warnings only: the file compiles
    lines = out.stdout.splitlines()
    assert "planted.cu:5:5: warning STC001 " in "\n".join(lines)
    assert any(l.startswith("planted.cu:13:9: warning STC002 ") for l in lines)
    assert any(l.startswith("planted.cu:19:5: warning STC009 ") for l in lines)


def test_json_output(tmp_path):
    (tmp_path / "planted.cu").write_text(PLANTED)
    out = stitch("check", "planted.cu", "--no-compile", "--json", cwd=tmp_path)
    data = json.loads(out.stdout)
    (f,) = data["files"]
    assert {(x["code"], x["range"]["start"]["line"]) for x in f["findings"]} == {
        ("STC001", 4), ("STC002", 12), ("STC009", 18),
    }
    assert data["errors"] == 0 and f["compile"]["status"] == "skipped"


def test_usage_errors_exit_2(tmp_path):
    assert stitch("check", "missing.cu", cwd=tmp_path).returncode == 2
    assert stitch("check", cwd=tmp_path).returncode == 2
    (tmp_path / "notes.txt").write_text("hi")
    assert stitch("check", "notes.txt", cwd=tmp_path).returncode == 2


@pytest.mark.nvcc
def test_directory_with_compile_errors_and_resources(tmp_path):
    pkg = tmp_path / "kernels"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "good.cu").write_text(
        "__global__ void good(float* __restrict__ y, int n) {\n"
        "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
        "    if (i < n) y[i] = 1.0f;\n"
        "}\n"
    )
    (pkg / "sub" / "bad.cu").write_text("__global__ void bad(float* y) {\n    y[0] = nope;\n}\n")
    (pkg / "blob.cu").write_bytes(b"\x00\x01binary")
    out = stitch("check", "kernels", "--arch", "sm_90", cwd=tmp_path)
    assert out.returncode == 1
    assert 'kernels/sub/bad.cu:2:12: error nvcc identifier "nope" is undefined' in out.stdout
    assert "kernels/good.cu:1: kernel good ⟨" in out.stdout and "regs" in out.stdout
    assert "blob.cu: skipped: binary file" in out.stderr


@pytest.mark.nvcc
def test_clean_file_exits_0_and_missing_nvcc_is_one_note(tmp_path):
    (tmp_path / "a.cu").write_text("__global__ void a(float* y, int n) { int i = threadIdx.x; if (i < n) y[i] = 1.0f; }\n")
    (tmp_path / "b.cu").write_text("__global__ void b(float* y, int n) { int i = threadIdx.x; if (i < n) y[i] = 2.0f; }\n")
    out = stitch("check", "a.cu", cwd=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    out = stitch("check", "a.cu", "b.cu", "--nvcc", str(tmp_path / "none"), cwd=tmp_path)
    assert out.returncode == 0
    assert out.stderr.count("could not find nvcc") == 1


def test_readme_example_exists_and_is_clean_of_errors():
    example = REPO / "stitch_lsp" / "examples" / "softmax.cu"
    if not example.exists():
        pytest.skip("the bundled example is not here yet")
    out = stitch("check", str(example), "--no-compile", cwd=REPO)
    assert out.returncode in (0, 1)
    assert "Traceback" not in out.stderr
