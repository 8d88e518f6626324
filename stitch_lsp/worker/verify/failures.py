"""How the verify run ends early, and how it reads an exception a candidate or reference raised."""

from __future__ import annotations

import traceback

import torch

from stitch_lsp.verdict import Verdict

CUDA_FAULTS = ("illegal memory access", "misaligned address", "unspecified launch failure", "illegal instruction",
               "an illegal", "device-side assert", "CUDA error", "cudaErrorLaunchFailure", "hardware stack error",
               "operation not permitted when stream is capturing", "AcceleratorError")


class Stop(Exception):
    """Ends the run with this verdict."""

    def __init__(self, verdict: Verdict) -> None:
        super().__init__(verdict.summary)
        self.verdict = verdict


def short(exc: BaseException, limit: int = 400) -> str:
    text = f"{type(exc).__name__}: {exc}".strip()
    return text if len(text) <= limit else text[: limit - 3] + "..."


def where(exc: BaseException, path: str) -> str:
    """The innermost frame of ``exc`` that lies in ``path`` (file:line), for messages."""
    for frame in reversed(traceback.extract_tb(exc.__traceback__)):
        if frame.filename == path:
            return f" (line {frame.lineno})"
    return ""


def is_oom(exc: BaseException) -> bool:
    return isinstance(exc, (MemoryError, torch.cuda.OutOfMemoryError)) or "out of memory" in str(exc).lower()


def is_cuda_fault(exc: BaseException) -> bool:
    text = f"{type(exc).__name__}: {exc}"
    return any(marker in text for marker in CUDA_FAULTS)
