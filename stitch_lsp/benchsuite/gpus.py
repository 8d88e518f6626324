"""The GPUs a run uses: which ones (without importing torch: ``CUDA_VISIBLE_DEVICES`` when set,
else the devices ``nvidia-smi -L`` lists; one worker per GPU), and their copy bandwidth, measured
in the same run as the tasks it judges (a worker request, ``copy_bandwidth``, times a large
device-to-device copy with CUDA events; bandwidth counts the bytes read and written)."""

from __future__ import annotations

import os
import shutil
import subprocess
from typing import Any

from stitch_lsp.benchsuite.results import GpuInfo
from stitch_lsp.cancellation import CancelToken
from stitch_lsp.contract.copy_bandwidth import CopyBandwidthReply, CopyBandwidthRequest

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


def measure_gpu(pool: Any, slot: str, cancel: CancelToken, timeout_s: float = 180.0) -> GpuInfo:
    """Measure the copy bandwidth of the GPU behind ``pool`` (a ``verify.worker_pool.WorkerPool``)."""
    info = GpuInfo(slot=slot)
    try:
        reply = pool.call("copy_bandwidth", CopyBandwidthRequest(), CopyBandwidthReply,
                          timeout_s=timeout_s, cancel=cancel)
    except Exception as exc:  # WorkerDied / WorkerError (no GPU, a crash) or an older worker without the kind
        info.message = f"copy bandwidth not measured: {getattr(exc, 'message', '') or exc}"
        return info
    info.device = reply.device
    info.copy_bandwidth_gbs = round(reply.gbs_median, 1)
    info.copy_method = reply.method
    if info.device is not None:
        info.device.copy_bandwidth_gbs = info.copy_bandwidth_gbs
    return info
