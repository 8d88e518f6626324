"""`stitch fuse` on selections from files that import torch in every usual way.

The Task written under ``.stitch/tasks/`` and the kernel modules generated from it
must import what they use: the Task runs in a fresh Python process, and the module
an accepted edit writes imports without Stitch. A regression here is a NameError
in the user's face ("name 'nn' is not defined").
"""

from __future__ import annotations

import builtins
import json
import os
import shutil
import subprocess
import sys
import symtable
import textwrap
from pathlib import Path

import pytest

from stitch_lsp.fuse.edit import LOADER_MODULE, loader_import, loader_source
from stitch_lsp.coders.template import edit_module, lower
from stitch_lsp.pipeline import Plan
from stitch_lsp.serde import from_json

REPO = Path(__file__).resolve().parents[2]

# (id, file text, the line to select (a substring of it), how many lines from it)
CASES = [
    ("functional-only", """
        import torch
        import torch.nn.functional as F


        def block(x, w, b, scale):
            # stitch: x=[8,256] float32, w=[256,128] float32, b=[128] float32, scale=[128] float32
            y = F.gelu(x @ w + b) * scale
            return y
        """, "y = F.gelu", 1),
    ("from-torch-import-nn", """
        import torch
        from torch import nn


        class Block(nn.Module):
            def __init__(self, dim=64):
                super().__init__()
                inner = dim * 2
                self.proj = nn.Linear(dim, inner)
                self.scale = nn.Parameter(torch.ones(inner))

            def forward(self, x):
                # stitch: x=[8,64] float32
                h = self.proj(x)
                y = nn.functional.gelu(h) * self.scale
                return y
        """, "h = self.proj", 2),
    ("functional-as-Fn", """
        import torch
        import torch.nn.functional as Fn


        def gate(x, g):
            # stitch: x=[8,256] bf16, g=[8,256] bf16
            y = Fn.silu(x) * Fn.sigmoid(g)
            return y
        """, "y = Fn.silu", 1),
    ("from-torch-nn-import-functional", """
        from torch.nn import functional as F
        import torch


        def act(x, b):
            # stitch: x=[8,256] float32, b=[256] float32
            y = F.relu(x + b) * 2.0
            return y
        """, "y = F.relu", 1),
    ("torch-relu-no-nn", """
        import torch


        def act(x, b, g):
            # stitch: x=[8,256] float32, b=[256] float32, g=[8,256] float32
            y = torch.relu(x + b) * torch.sigmoid(g)
            return y
        """, "y = torch.relu", 1),
    ("tensor-methods", """
        import torch


        def act(x, b, g):
            # stitch: x=[8,256] float16, b=[256] float16, g=[8,256] float16
            y = (x + b).relu() * g.sigmoid()
            return y
        """, "y = (x + b)", 1),
    ("import-torch-as-th", """
        import torch as th


        def act(x, g):
            # stitch: x=[8,256] float32, g=[8,256] float32
            y = th.tanh(x) + th.sigmoid(g)
            return y
        """, "y = th.tanh", 1),
    ("from-functional-import-names", """
        import torch
        from torch.nn.functional import gelu, silu


        def act(x, g):
            # stitch: x=[8,256] float32, g=[8,256] float32
            y = gelu(x) * silu(g)
            return y
        """, "y = gelu", 1),
    ("module-torch-nn-full-path", """
        import math
        import torch

        HIDDEN = 128
        SCALE = 1.0 / math.sqrt(HIDDEN)


        class Block(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.norm = torch.nn.LayerNorm(HIDDEN)

            def forward(self, x):
                # stitch: x=[8,128] float32
                h = self.norm(x) * SCALE
                y = torch.nn.functional.gelu(h)
                return y
        """, "h = self.norm", 2),
    ("import-inside-forward", """
        import torch


        class Block(torch.nn.Module):
            def forward(self, x, b):
                import torch.nn.functional as F
                # stitch: x=[8,256] float32, b=[256] float32
                y = F.gelu(x + b) * 0.5
                return y
        """, "y = F.gelu", 1),
]


def _workspace(tmp_path: Path, text: str) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "pyproject.toml").write_text("[project]\nname = 'user'\n")
    model = ws / "model.py"
    model.write_text(textwrap.dedent(text).lstrip())
    return model


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO), "CUDA_VISIBLE_DEVICES": ""}


def _fuse(model: Path, needle: str, count: int, *extra: str) -> subprocess.CompletedProcess:
    line = next(i for i, l in enumerate(model.read_text().splitlines(), 1) if needle in l)
    return subprocess.run([sys.executable, "-m", "stitch_lsp.cli", "fuse", f"{model}:{line}-{line + count - 1}",
                           "--no-record", *extra], capture_output=True, text=True, timeout=300,
                          cwd=model.parent, env=_env())


def undefined_globals(source: str) -> set[str]:
    """Names a module reads as globals (at module level or in its functions) that nothing binds."""
    top = symtable.symtable(source, "<module>", "exec")
    bound = {s.get_name() for s in top.get_symbols() if s.is_assigned() or s.is_imported()}
    bound |= set(dir(builtins)) | {"__file__", "__name__"}
    missing: set[str] = set()

    def visit(table: symtable.SymbolTable) -> None:
        for s in table.get_symbols():
            if s.is_referenced() and (table is top or s.is_global()) and s.get_name() not in bound:
                missing.add(s.get_name())
        for child in table.get_children():
            visit(child)

    visit(top)
    return missing


def test_undefined_globals_catches_a_missing_import():
    assert undefined_globals("import torch\ndef f(x):\n    return torch.relu(x)\n") == set()
    assert undefined_globals("def f(x):\n    return nn.functional.relu(x)\n") == {"nn"}
    assert undefined_globals("y = json.loads('1')\n") == {"json"}


@pytest.mark.timeout(300)
@pytest.mark.parametrize("text,needle,count", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_generated_task_and_kernel_modules_import_what_they_use(tmp_path, text, needle, count):
    model = _workspace(tmp_path, text)
    run = _fuse(model, needle, count, "--no-verify")
    assert run.returncode == 0, run.stdout + run.stderr
    assert "Could not trace" not in run.stdout and "NameError" not in run.stdout + run.stderr
    (task_dir,) = (model.parent / ".stitch" / "tasks").iterdir()
    reference = (task_dir / "reference.py").read_text()
    candidate = (task_dir / "candidate.py").read_text()
    assert undefined_globals(reference) == set(), reference
    assert undefined_globals(candidate) == set(), candidate
    # The module an accepted edit writes, next to its copied loader, in a package of its own.
    plan = from_json((task_dir / "plan.json").read_text(), Plan)
    kernels = tmp_path / "edit" / "stitch_kernels"
    kernels.mkdir(parents=True)
    (kernels / "__init__.py").write_text("")
    (kernels / f"{LOADER_MODULE}.py").write_text(loader_source())
    (kernels / "fused.py").write_text(edit_module(lower(plan.graph), loader_import=loader_import(True),
                                                  func_name="fused", header="test"))
    assert undefined_globals((kernels / "fused.py").read_text()) == set()
    # A fresh interpreter that cannot import Stitch (-I: no PYTHONPATH, no user site; and a finder
    # that refuses it, since an installed Stitch sits in site-packages) runs the Task on CPU and
    # imports the edit's module.
    probe = textwrap.dedent(f"""
        import importlib.util, json, sys

        class NoStitch:
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] == "stitch_lsp":
                    raise ModuleNotFoundError(name)

        sys.meta_path.insert(0, NoStitch())
        ns = {{"__name__": "reference"}}
        exec(compile(open({str(task_dir / 'reference.py')!r}).read(), "reference.py", "exec"), ns)
        model = ns["Model"](*ns["get_init_inputs"]())
        out = model(*ns["get_inputs"]())
        sys.path.insert(0, {str(tmp_path / 'edit')!r})
        import stitch_kernels.fused as fused
        assert callable(fused.fused)
        print("ok", tuple(out.shape))
    """)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    checked = subprocess.run([sys.executable, "-I", "-c", probe], capture_output=True, text=True, timeout=300,
                             cwd=tmp_path, env=env)
    assert checked.returncode == 0 and checked.stdout.startswith("ok"), checked.stderr[-3000:]


@pytest.mark.timeout(300)
def test_reported_selection_fuses_to_the_no_cuda_message(tmp_path):
    """The client developer's report: `import torch` + `import torch.nn.functional as F` only."""
    model = _workspace(tmp_path, CASES[0][1])
    run = _fuse(model, "y = F.gelu", 1, "--json")
    outcome = json.loads(run.stdout)
    assert "NameError" not in outcome["message"] and "Could not trace" not in outcome["message"], outcome["message"]
    assert outcome["plan"] and outcome["candidate"]["cuda_sources"], outcome["message"]
    if shutil.which("nvidia-smi") is None:
        assert outcome["message"].startswith("No CUDA device"), outcome["message"]
    assert (model.read_text() == textwrap.dedent(CASES[0][1]).lstrip())  # nothing written to the user's file
