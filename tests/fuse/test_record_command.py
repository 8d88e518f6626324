"""`stitch record`: the user's command as it is, their own sitecustomize still runs, and every way it can go
wrong is one line (never a traceback)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _record(root: Path, *command: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "stitch_lsp.cli", "record", "--", *command], cwd=root,
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(REPO), **(env or {})})


def _workspace(tmp_path: Path) -> Path:
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "mod.py").write_text(textwrap.dedent("""
        def step(n, flag):
            total = n * 2
            if flag:
                total += 1
            else:
                total -= 1
            return total
        """))
    (tmp_path / "main.py").write_text("import mod\nprint(mod.step(21, True))\n")
    return tmp_path


def test_scalars_and_lines_are_recorded_and_the_users_sitecustomize_still_runs(tmp_path):
    root = _workspace(tmp_path / "ws")
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (theirs / "sitecustomize.py").write_text("import os\nos.environ['THEIR_SITE'] = 'ran'\n")
    (root / "main.py").write_text("import os, mod\nprint(mod.step(21, True), os.environ.get('THEIR_SITE'))\n")
    env = {"PYTHONPATH": f"{REPO}{os.pathsep}{theirs}"}
    run = _record(root, sys.executable, "main.py", env=env)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "43 ran"  # the program's own output, its own sitecustomize
    data = json.loads((root / ".stitch" / "recordings" / "mod.py" / "step.json").read_text())
    assert data["lines"]["3"]["n"] == {"k": "int", "v": 21} and data["lines"]["3"]["flag"]["v"] is True
    assert data["lines"]["4"]["total"] == {"k": "int", "v": 42}
    assert "7" not in data["lines"]  # the else: never ran


def test_what_goes_wrong_is_one_line(tmp_path):
    root = _workspace(tmp_path)
    cases = [
        ((), "give the command to run after --", 2),
        (("no-such-program-here",), "cannot start 'no-such-program-here'", 1),
        ((sys.executable, "-I", "-c", "print(1)"), "started no Python that loaded the recorder", 1),
        ((sys.executable, "-c", "print(1)"), "ran none of the functions", 1),
    ]
    for command, says, rc in cases:
        run = _record(root, *command)
        assert run.returncode == rc, (command, run.stderr)
        assert says in run.stderr and "Traceback" not in run.stderr + run.stdout, (command, run.stderr)
