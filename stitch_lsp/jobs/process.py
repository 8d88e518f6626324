"""Child processes that die with their job: started in their own process group,
killed (the whole group) when the job's token is cancelled."""

from __future__ import annotations

import os
import signal
import subprocess
from typing import Sequence

from stitch_lsp.cancellation import Cancelled, CancelToken
from stitch_lsp.child_env import tool_env


def kill_tree(proc: subprocess.Popen) -> None:
    """SIGKILL the process group ``proc`` leads (it was started with ``start_new_session``),
    grandchildren included, even when ``proc`` itself has already exited."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        try:
            proc.kill()
        except ProcessLookupError:
            pass


def run_cancellable(
    argv: Sequence[str],
    token: CancelToken,
    *,
    cwd: str | None = None,
    env: dict[str, str] | None = None,
    input_text: str | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` to completion; on cancel kill its process tree and raise ``Cancelled``."""
    token.raise_if_cancelled()
    proc = subprocess.Popen(
        list(argv),
        cwd=cwd,
        env=tool_env() if env is None else env,  # allowlisted, never the server's own environment
        stdin=subprocess.PIPE if input_text is not None else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    unregister = token.on_cancel(lambda: kill_tree(proc))
    try:
        out, err = proc.communicate(input_text)
    finally:
        unregister()
        kill_tree(proc)  # grandchildren left behind by a finished child
    token.raise_if_cancelled()
    return subprocess.CompletedProcess(list(argv), proc.returncode, out, err)
