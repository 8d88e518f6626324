"""Real model files on the CPU: the user's program recorded, then selections of the code shapes real model
files have (a branch's else:, in-file functions and methods, config-built submodules, a ModuleDict and a
lambda over it, a buffer registered inside a branch, a loop body) become Tasks that run.

The model is our own small reproduction (tests/fixtures/model_files): a package import, a dataclass config.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from stitch_lsp.task.selection import prepare
from stitch_lsp.settings import Settings

REPO = Path(__file__).resolve().parents[2]
FIXTURE = REPO / "tests" / "fixtures" / "model_files"
MODEL = "pkg/model.py"


def _line(text: str, needle: str) -> int:
    return next(i for i, l in enumerate(text.splitlines()) if needle in l)


def _stitch(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "stitch_lsp.cli", *args], capture_output=True, text=True,
                          timeout=600, cwd=cwd, env={**os.environ, "PYTHONPATH": str(REPO), "CUDA_VISIBLE_DEVICES": ""})


@pytest.fixture(scope="module")
def workspace(tmp_path_factory) -> Path:
    """The fixture copied, and `stitch record -- python run.py` run in it once."""
    root = tmp_path_factory.mktemp("models") / "ws"
    shutil.copytree(FIXTURE, root)
    run = _stitch("record", "--", sys.executable, "run.py", cwd=root)
    assert run.returncode == 0, run.stderr
    assert "Traceback" not in run.stdout + run.stderr
    assert "recorded" in run.stderr and "Unit with" in run.stdout  # the program ran as it does without us
    return root


def _prepare(root: Path, first: str, last: str | None = None):
    text = (root / MODEL).read_text()
    return prepare(text, MODEL, _line(text, first), _line(text, last or first), Settings(), root=root)


def _run_task(source: str):
    """Execute the Task as the Verifier would (CPU here): build Model, call it on get_inputs()."""
    import torch

    ns: dict = {"__name__": "stitch_task"}
    exec(compile(source, "reference.py", "exec"), ns)
    model = ns["Model"](*ns["get_init_inputs"]()).eval()
    with torch.no_grad():
        return model(*ns["get_inputs"]())


def test_recordings_are_per_function_and_the_package_import_works(workspace):
    rec = workspace / ".stitch" / "recordings" / "pkg" / "model.py"
    names = {p.name for p in rec.glob("*.json")}
    assert {"Mixer.forward.json", "Mixer.__init__.json", "Unit.forward.json", "Unit.__init__.json"} <= names, names
    assert "Unit.unused.json" not in names  # never called
    assert (workspace / ".stitch" / "recordings" / "pkg" / "util.py" / "describe.json").is_file()


def test_else_branch_that_never_ran_gets_its_inputs_from_the_enclosing_if(workspace):
    p = _prepare(workspace, "w = scaled(q @ k.transpose", "y = self.drop(w) @ v")
    assert p.task is not None, p.problem
    text = (workspace / MODEL).read_text()
    assert p.recording.found and p.recording.line == _line(text, "if self.fast:") + 1
    assert p.region.nesting == [f"else: of the if on line {_line(text, 'if self.fast:') + 1}"]
    assert p.shapes.specs["q"].shape == (2, 4, 16, 16) and p.shapes.scalars["t"] == "16"
    assert "def scaled(x):" in p.task.source  # the file's function, inlined by tracing
    assert 'self.register_buffer("mask"' in p.task.source  # registered under `if not self.fast:` in the file
    assert "width=64" in p.task.source and "types.SimpleNamespace" in p.task.source  # the recorded config
    out = _run_task(p.task.source)
    assert tuple(out.shape) == (2, 4, 16, 16)


def test_inputs_the_program_passed_transposed_keep_their_layout_in_the_task(workspace):
    import torch

    p = _prepare(workspace, "w = scaled(q @ k.transpose", "y = self.drop(w) @ v")
    assert p.task is not None, p.problem
    ns: dict = {"__name__": "stitch_task"}
    exec(compile(p.task.source, "reference.py", "exec"), ns)
    given = dict(zip(p.region.inputs, ns["get_inputs"]()))
    for name in ("q", "k", "v"):  # `.view(...).transpose(1, 2)` in the program: not contiguous there
        spec = p.shapes.specs[name]
        assert spec.strides is not None and given[name].stride() == spec.strides, (name, spec)
        assert not given[name].is_contiguous()
        assert tuple(given[name].shape) == spec.shape
    assert isinstance(_run_task(p.task.source), torch.Tensor)


def test_config_built_submodules_moduledict_lambda_and_method(workspace):
    p = _prepare(workspace, "x = x + self.mix(self.norm(x))", "x = x + self.ffn(self._rms(x))")
    assert p.task is not None, p.problem
    src = p.task.source
    assert "class Mixer(nn.Module):" in src and "class Gate(nn.Module):" in src
    assert "f = self.ff" in src and src.index("self.ff = nn.ModuleDict") < src.index("f = self.ff") \
        < src.index("self.ffn = lambda")
    assert "def _rms(self, x):" in src
    assert "describe" not in src  # the package import the selection does not need stays out
    assert tuple(_run_task(src).shape) == (2, 16, 64)


def test_loop_body_is_fused_and_the_loop_stays_in_python(workspace):
    p = _prepare(workspace, "x = x * 0.5", "x = torch.tanh(x)")
    assert p.task is not None, p.problem
    assert p.region.outputs == ["x"] and p.region.nesting and "for" in p.region.nesting[0]
    assert "for _ in range" not in p.task.source


def test_a_function_the_program_never_ran_says_so_and_names_the_recording(workspace):
    p = _prepare(workspace, "y = torch.relu(x) * 2")
    assert p.task is None
    assert "never called Unit.unused" in p.problem and ".stitch/recordings/pkg/model.py/Unit.unused.json" in p.problem


def test_an_edit_invalidates_only_that_functions_recording(workspace, tmp_path):
    root = tmp_path / "edited"
    shutil.copytree(workspace, root)
    text = (root / MODEL).read_text().replace("return x * torch.rsqrt(", "return 1.0 * x * torch.rsqrt(")
    (root / MODEL).write_text(text)
    p = _prepare(root, "x = x + self.mix(self.norm(x))", "x = x + self.ffn(self._rms(x))")
    assert p.task is not None  # Unit.forward did not change: its recording holds
    q = _prepare(root, "return 1.0 * x * torch.rsqrt(")
    assert q.task is None and "Unit._rms changed since it was recorded" in q.problem


def test_cli_reaches_a_candidate_and_says_it_cannot_run_without_a_gpu(workspace):
    text = (workspace / MODEL).read_text()
    start, end = _line(text, "w = scaled(q @ k"), _line(text, "y = self.drop(w) @ v")
    run = _stitch("fuse", f"{MODEL}:{start + 1}-{end + 1}", cwd=workspace)
    out = run.stdout + run.stderr
    assert "Traceback" not in out
    assert "Shapes: recorded (.stitch/recordings/pkg/model.py/Mixer.forward.json" in run.stderr
    assert "No CUDA device here: the candidate was generated" in run.stdout, out
