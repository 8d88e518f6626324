"""The suite's edit check (bench/fuse_template_suite.py), on CPU: its harness isolates each task.

The real edits' kernels need CUDA, so on CPU they must import without Stitch and then fail with
the "CUDA tensors" message; stand-in modules that pass, give wrong results, crash the process
and import Stitch get a per-task outcome each, and the task after the crash still runs.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(400)
def test_edit_check_harness_self_test():
    run = subprocess.run([sys.executable, str(REPO / "bench" / "fuse_template_suite.py"), "--self-test"],
                         capture_output=True, text=True, timeout=380,
                         env={**os.environ, "PYTHONPATH": str(REPO), "CUDA_VISIBLE_DEVICES": ""})
    assert run.returncode == 0 and "self-test passed" in run.stdout, run.stdout[-3000:] + run.stderr[-3000:]
