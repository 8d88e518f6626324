"""The device's copy bandwidth, measured in the same run as the tasks it judges.

A worker request (``copy_bandwidth``, handled by
``stitch_lsp.worker.copy_bandwidth_handler``) times a large device-to-device copy
with CUDA events; bandwidth counts the bytes read and written. These classes are
plain data so the bench (which never imports torch) can ask for it.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from attrs import define

from stitch_lsp.benchsuite.results import GpuInfo
from stitch_lsp.cancellation import CancelToken
from stitch_lsp.settings import Settings
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


def measure_gpu(settings: Settings, slot: str, cancel: CancelToken, timeout_s: float = 120.0) -> GpuInfo:
    """Describe the GPU this process sees and measure its copy bandwidth, through a worker."""
    info = GpuInfo(slot=slot)
    try:
        from stitch_lsp.verify.worker_pool import WorkerPool, WorkerDied, WorkerError
    except ImportError as exc:
        info.message = f"copy bandwidth not measured: the Verifier's worker pool is missing ({exc})"
        return info
    with tempfile.TemporaryDirectory(prefix="stitch-bench-bw-") as workdir:
        pool = WorkerPool(settings, Path(workdir))
        try:
            reply = pool.call("copy_bandwidth", CopyBandwidthRequest(), CopyBandwidthReply,
                              timeout_s=timeout_s, cancel=cancel)
        except (WorkerDied, WorkerError) as exc:
            info.message = f"copy bandwidth not measured: {exc}"
            return info
        except Exception as exc:  # an older worker without the request kind, a changed pool API
            info.message = f"copy bandwidth not measured: {type(exc).__name__}: {exc}"
            return info
        finally:
            pool.close()
    info.device = reply.device
    info.copy_bandwidth_gbs = round(reply.gbs_median, 1)
    info.copy_method = reply.method
    if info.device is not None:
        info.device.copy_bandwidth_gbs = info.copy_bandwidth_gbs
    return info
