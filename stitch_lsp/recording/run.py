"""Run the user's own command once under the shape recorder (``stitch record``, "Stitch: Record shapes").

It is their program: it runs with their environment, in their folder. Only the
recorder's bootstrap is added (its folder first on ``PYTHONPATH``, where Python's
``site`` imports its ``sitecustomize``), so the program imports its files as it
always does (packages, dataclasses, its own ``sys.path``).
"""

from __future__ import annotations

import os
import shlex
import subprocess
import time
import uuid
from pathlib import Path
from typing import Callable, Mapping

from attrs import define, field

SITE_DIR = Path(__file__).resolve().parent / "site"


@define
class RecordRun:
    command: list[str]
    returncode: int | None = None
    seconds: float = 0.0
    functions: list[str] = field(factory=list)  # "path:qualname" recorded by this run
    started: bool = False  # a Python process of the command loaded the recorder
    message: str = ""  # one line for the user


def split_command(text: str) -> list[str]:
    """A command line as the user wrote it in a setting; ValueError names what does not parse."""
    try:
        argv = shlex.split(text)
    except ValueError as exc:
        raise ValueError(f"cannot read the command {text!r}: {exc}") from None
    if not argv:
        raise ValueError("the command is empty")
    return argv


def users_env() -> dict[str, str]:
    """The user's own environment, as it is: it is their command (the one exception to the allowlisted
    environment every other child gets)."""
    try:
        from stitch_lsp.child_env import user_command_env  # the security module's one helper, where present
    except ImportError:
        return dict(os.environ)
    return user_command_env()


def recorder_env(root: Path, run_id: str, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The user's own environment (``base``, default ``users_env()``) plus the recorder's bootstrap."""
    env = dict(users_env() if base is None else base)
    env["PYTHONPATH"] = os.pathsep.join([str(SITE_DIR)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    env["STITCH_RECORD_ROOT"] = str(root)
    env["STITCH_RECORD_RUN"] = run_id
    return env


def record(command: list[str], root: Path, *, cwd: Path | None = None, env: Mapping[str, str] | None = None,
           timeout_s: float | None = None, output: Callable[[str], None] | None = None,
           on_start: Callable[[subprocess.Popen], None] | None = None) -> RecordRun:
    """Run ``command`` once; recordings go to ``root/.stitch/recordings``. ``output``: each line the program
    prints (stdout and stderr together); None lets it print to ours."""
    root = root.resolve()
    run = RecordRun(command=list(command))
    rec_dir = root / ".stitch" / "recordings"
    rec_dir.mkdir(parents=True, exist_ok=True)
    run_id = uuid.uuid4().hex[:12]
    started = time.perf_counter()
    try:
        proc = subprocess.Popen(command, cwd=str(cwd or Path.cwd()), env=recorder_env(root, run_id, env),
                                stdout=subprocess.PIPE if output else None,
                                stderr=subprocess.STDOUT if output else None, text=True)
    except OSError as exc:
        run.message = f"cannot start {command[0]!r}: {exc.strerror or exc}"
        return run
    if on_start is not None:
        on_start(proc)
    try:
        if output is not None and proc.stdout is not None:
            for line in proc.stdout:
                output(line.rstrip("\n"))
        run.returncode = proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        run.message = f"{shlex.join(command)} ran longer than {timeout_s:.0f} s and was stopped; nothing recorded"
        return run
    run.seconds = time.perf_counter() - started
    run.started = _started(rec_dir, run_id)
    run.functions = _recorded(rec_dir, run_id)
    cmd = shlex.join(command)
    if not run.started:
        run.message = (f"nothing recorded: {cmd} started no Python that loaded the recorder "
                       "(the command must run Python without -I, -S or -E)")
    elif not run.functions:
        run.message = f"nothing recorded: {cmd} ran none of the functions of the files under {root}"
    else:
        files = {f.split(":", 1)[0] for f in run.functions}
        run.message = (f"recorded {len(run.functions)} functions in {len(files)} files under {rec_dir} "
                       f"({cmd}: {run.seconds:.1f} s, exit status {run.returncode})")
    return run


def _started(rec_dir: Path, run_id: str) -> bool:
    try:
        return any(line.split()[-1:] == [run_id] for line in (rec_dir / ".started").read_text().splitlines())
    except OSError:
        return False


def _recorded(rec_dir: Path, run_id: str) -> list[str]:
    import json

    out = []
    for path in sorted(rec_dir.rglob("*.json")):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(data, dict) and data.get("run") == run_id:
            out.append(f"{data.get('path')}:{data.get('function')}")
    return out
