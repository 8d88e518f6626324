"""The worker's ``copy_bandwidth`` request: time a large device-to-device copy with CUDA events (bandwidth
counts the bytes read and written), so the bench (which never imports torch) judges tasks by this GPU's limit."""

from __future__ import annotations

from attrs import define

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
