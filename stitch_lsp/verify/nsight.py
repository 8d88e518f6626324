"""Nsight Compute profiling and compute-sanitizer runs of a verify job, in child processes."""

from __future__ import annotations

import shutil
from pathlib import Path

from stitch_lsp.cancellation import CancelToken
from stitch_lsp.settings import Settings
from stitch_lsp.verdict import Profile, Sanitizer
from stitch_lsp.verify.options import VerifyJob


def profile(settings: Settings, job: VerifyJob, workdir: Path, *, cancel: CancelToken | None = None) -> Profile:
    if shutil.which("ncu") is None:
        return Profile(status="skipped", message="ncu (Nsight Compute) is not on PATH: no profile")
    return Profile(status="skipped", message="profiling is not wired into verify yet")


def sanitize(settings: Settings, job: VerifyJob, workdir: Path, *, cancel: CancelToken | None = None) -> Sanitizer:
    if shutil.which("compute-sanitizer") is None:
        return Sanitizer(status="skipped", message="compute-sanitizer is not on PATH: not run")
    return Sanitizer(status="skipped", message="sanitizing is not wired into verify yet")
