"""The edit an accepted kernel makes, and `stitch fuse` from a terminal (CPU: nothing is applied)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from stitch_lsp.fuse.edit import apply_text_edits, build_edit, call_arguments, names_for
from stitch_lsp.task.selection import prepare
from stitch_lsp.op_graph import GraphInput, OpGraph
from stitch_lsp.settings import Settings

REPO = Path(__file__).resolve().parents[2]
FIXTURE = REPO / "tests" / "fixtures" / "fuse" / "block.py"
SRC = FIXTURE.read_text()
LINES = SRC.splitlines()


def line_of(text: str) -> int:
    return next(i for i, l in enumerate(LINES) if text in l)


def _graph() -> OpGraph:
    # What tracing the selection gives: parameters and buffers first, then forward's inputs.
    return OpGraph(inputs=[
        GraphInput("arg0_1", "param", "norm.weight", 0, (256,)),
        GraphInput("arg1_1", "param", "norm.bias", 0, (256,)),
        GraphInput("arg2_1", "param", "scale", 0, (256,)),
        GraphInput("arg3_1", "buffer", "shift", 0, (256,)),
        GraphInput("arg4_1", "input", "", 0, (32, 256)),
        GraphInput("arg5_1", "input", "", 1, (32, 256)),
    ], outputs=["add_1"])


def test_edit_replaces_the_selection_with_a_call_and_imports_it():
    p = prepare(SRC, "block.py", line_of("h = self.norm(x + residual)"), line_of("h = h * self.scale"), Settings())
    assert p.task is not None
    module_path, func = names_for(p.task, Settings())
    assert module_path.startswith("stitch_kernels/fused_") and module_path.endswith(".py")
    graph = _graph()
    assert call_arguments(graph, p.task) == ["self.norm.weight", "self.norm.bias", "self.scale", "self.shift",
                                             "x", "residual"]
    files = {module_path: "# kernels\n"}
    edit = build_edit(p.task, graph, SRC, files, module_path, func, indent=p.region.indent, returns=False)
    new = apply_text_edits(SRC, edit.edits)
    assert f"from stitch_kernels.{func} import {func}\n" in new
    # the import lands after the file's imports, before its code
    assert new.index(f"import {func}") > new.index("import torch.nn.functional as F")
    assert new.index(f"import {func}") < new.index("EPS = 1e-5")
    call = f"        h = {func}(self.norm.weight, self.norm.bias, self.scale, self.shift, x, residual)"
    assert call in new.splitlines()
    assert "self.norm(x + residual)" not in new and "h * self.scale + self.shift" not in new
    assert "y = F.gelu(self.up(h))" in new  # the rest is untouched
    compile(new, "block.py", "exec")
    assert edit.files == files


def test_edit_of_a_returning_selection_returns_the_call():
    p = prepare(SRC, "block.py", line_of("y = x + b"), line_of("return z"), Settings(),
                recorded=None)
    assert p.task is None and "no shapes" in p.problem  # free function: no get_inputs for x, b
    settings = Settings(shapes={"x": "8x16 float32", "b": "16 float32"})
    p = prepare(SRC, "block.py", line_of("y = x + b"), line_of("return z"), settings)
    assert p.task is not None and p.task.output_names == ["<return>"]
    graph = OpGraph(inputs=[GraphInput("a", "input", "", 0, (8, 16)), GraphInput("c", "input", "", 1, (16,))],
                    outputs=["z"])
    edit = build_edit(p.task, graph, SRC, {}, "stitch_kernels/f.py", "f", indent=p.region.indent, returns=True)
    new = apply_text_edits(SRC, edit.edits)
    assert "    return f(x, b)" in new.splitlines()
    assert "z = F.gelu(y) * 0.5" not in new


@pytest.mark.timeout(600)
def test_cli_without_a_gpu_prints_the_plan_and_applies_nothing(tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "pyproject.toml").write_text("[project]\nname = 'ws'\n")
    model = ws / "block.py"
    shutil.copy(FIXTURE, model)
    start = line_of("h = self.norm(x + residual)") + 1
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    gpu = subprocess.run([sys.executable, "-c", "import torch; print(torch.cuda.is_available())"],
                         capture_output=True, text=True, env=env).stdout.strip().endswith("True")
    if gpu:
        pytest.skip("a GPU is present: tests/fuse/test_fuse_gpu.py covers --apply")
    run = subprocess.run([sys.executable, "-m", "stitch_lsp.cli", "fuse", f"{model}:{start}-{start + 1}", "--apply"],
                         cwd=ws, env=env, capture_output=True, text=True, timeout=550)
    assert run.returncode == 1, run.stdout + run.stderr
    assert "Plan for" in run.stdout and "row_reduction" in run.stdout
    assert "No CUDA device" in run.stdout or "Verifier is not available" in run.stderr
    assert "nothing applied" in run.stderr
    assert model.read_text() == SRC
    assert not (ws / "stitch_kernels").exists()
    kept = list((ws / ".stitch" / "tasks").glob("*/candidate.py"))
    assert kept, "the generated code is kept under .stitch/ to read"


def test_cli_bad_selection_says_why(tmp_path):
    model = tmp_path / "block.py"
    shutil.copy(FIXTURE, model)
    line = line_of("if out.sum() > 0") + 1
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    run = subprocess.run([sys.executable, "-m", "stitch_lsp.cli", "fuse", f"{model}:{line}-{line + 1}"],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode == 1 and "control flow" in run.stderr
    run = subprocess.run([sys.executable, "-m", "stitch_lsp.cli", "fuse", f"{model}:x-y"],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode == 2 and "FILE.py:START-END" in run.stderr
