"""The device's copy bandwidth, measured in the same run as the tasks it judges.

A worker request (``copy_bandwidth``, handled by
``stitch_lsp.worker.copy_bandwidth_handler``) times a large device-to-device copy
with CUDA events; bandwidth counts the bytes read and written. These classes are
plain data so the bench (which never imports torch) can ask for it.
"""

from __future__ import annotations

from typing import Any

from attrs import define

from stitch_lsp.benchsuite.results import GpuInfo
from stitch_lsp.cancellation import CancelToken
from stitch_lsp.verdict import DeviceInfo


@define
class CopyBandwidthRequest:
    nbytes: int = 1 << 30  # per buffer: large enough that L2 (50 MB on an H100) does not matter
    iterations: int = 30
    warmup: int = 5
    gpu_index: int = 0


@define
class CopyBandwidthReply:
    gbs_median: float
    gbs_best: float
    nbytes: int
    iterations: int
    method: str
    device: DeviceInfo | None = None


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
