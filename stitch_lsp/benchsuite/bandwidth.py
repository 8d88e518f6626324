"""The device's copy bandwidth, measured in the same run as the tasks it judges.

A worker request (``copy_bandwidth``, defined in ``stitch_lsp.contract.copy_bandwidth``)
times a large device-to-device copy with CUDA events; bandwidth counts the bytes read
and written.
"""

from __future__ import annotations

from typing import Any

from stitch_lsp.benchsuite.results import GpuInfo
from stitch_lsp.contract.copy_bandwidth import CopyBandwidthReply, CopyBandwidthRequest
from stitch_lsp.cancellation import CancelToken


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
