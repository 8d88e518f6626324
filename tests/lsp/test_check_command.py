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


def test_template_instantiations_fold_into_one_line():
    from stitch_lsp.commands.check_output import kernel_lines, unique_findings
    from stitch_lsp.findings import Finding, Range, Severity
    from stitch_lsp.verdict import KernelResources

    kernels = [KernelResources("scale", registers=r, line=4) for r in (10, 12, 16)] + \
        [KernelResources("copy", registers=8, line=9), KernelResources("copy", registers=8, line=9)]
    lines = kernel_lines(kernels)
    assert [(k.name, label) for k, label in lines] == [
        ("scale", "⟨10–16 regs · 0 B smem · 0 spill⟩ ×3 instantiations"),
        ("copy", "⟨8 regs · 0 B smem · 0 spill⟩ ×2 instantiations"),
    ]
    warning = Finding("k.cu", Range.of(4, 0, 4, 5), Severity.WARNING, "nvcc", "variable declared but never used")
    assert unique_findings([warning, warning]) == [warning]


@pytest.mark.nvcc
def test_a_template_kernel_prints_one_resource_line(tmp_path):
    (tmp_path / "t.cu").write_text(
        "template <typename T>\n"
        "__global__ void scale(T* y, T a, int n) {\n"
        "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
        "    if (i < n) y[i] *= a;\n"
        "}\n"
        "template __global__ void scale<float>(float*, float, int);\n"
        "template __global__ void scale<double>(double*, double, int);\n"
        "template __global__ void scale<int>(int*, int, int);\n"
    )
    out = stitch("check", "t.cu", "--arch", "sm_90", cwd=tmp_path)
    lines = [l for l in out.stdout.splitlines() if ": kernel scale " in l]
    assert len(lines) == 1 and lines[0].startswith("t.cu:2: kernel scale ⟨") and "×3 instantiations" in lines[0]
