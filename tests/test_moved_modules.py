"""A candidate generated before a module moved still imports: its old name is the module itself."""

from __future__ import annotations

import importlib
import importlib.util
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from stitch_lsp.moved import MOVED

REPO = Path(__file__).resolve().parents[1]

# What the binding module of a candidate generated before the stage packages named (the lines it wrote).
OLD_CANDIDATE = textwrap.dedent("""
    import sys

    def forward_program():
        from stitch_lsp.agents.template_coder.program import program_for
        return program_for

    def init_program():
        from stitch_lsp.agents.template_coder.program import program_for_init
        return program_for_init

    import stitch_lsp.coders.template.program as now
    assert forward_program() is now.program_for and init_program() is now.program_for_init
    print("ok")
""")


def test_a_candidate_generated_before_the_move_imports_in_a_fresh_interpreter(tmp_path):
    candidate = tmp_path / "candidate.py"
    candidate.write_text(OLD_CANDIDATE)
    done = subprocess.run([sys.executable, str(candidate)], cwd=tmp_path, capture_output=True, text=True,
                          env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"}, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "ok"


@pytest.mark.parametrize("old,new", sorted(MOVED.items()))
def test_every_old_name_points_at_a_module_that_exists(old, new):
    assert importlib.util.find_spec(new) is not None, f"{old} is kept for {new}, which no longer exists"
    assert not (REPO / (old.replace(".", "/") + ".py")).exists(), f"{old} is a real module again: drop it from MOVED"


def test_an_unknown_name_under_an_old_package_still_fails_cleanly():
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("stitch_lsp.agents.template_coder.no_such_module")
