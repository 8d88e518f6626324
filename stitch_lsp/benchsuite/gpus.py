"""Which GPUs a run may use, without importing torch: ``CUDA_VISIBLE_DEVICES`` when set,
else the devices ``nvidia-smi -L`` lists. One worker per GPU."""

from __future__ import annotations

import os
import shutil
import subprocess

from stitch_lsp.child_env import tool_env


def visible_gpus(env: dict[str, str] | None = None) -> list[str]:
    env = os.environ if env is None else env
    listed = env.get("CUDA_VISIBLE_DEVICES")
    if listed is not None:
        return [d.strip() for d in listed.split(",") if d.strip() and d.strip() != "-1"]
    smi = shutil.which("nvidia-smi")
    if not smi:
        return []
    try:
        out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=20, env=tool_env())
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [str(i) for i, line in enumerate(out.stdout.splitlines()) if line.startswith("GPU ")]


def slots(limit: int | None, env: dict[str, str] | None = None) -> list[str]:
    """Slot names (CUDA_VISIBLE_DEVICES values) to start workers on; ["cpu"] when no GPU is visible,
    so the run still ends with a clear verdict per task rather than nothing."""
    found = visible_gpus(env)
    if limit is not None:
        found = found[: max(limit, 0)]
    return found or ["cpu"]
