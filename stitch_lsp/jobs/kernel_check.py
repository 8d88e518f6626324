"""Checking a paired handwritten kernel: candidate → result cache → Verifier → Verdict.

Plain Python (no LSP): the editor submits ``KernelChecker.run`` as a job. The
Verifier (``stitch_lsp.verify.service.Verifier``) runs everything that executes
code in worker processes and kills them through the job's CancelToken.
"""

from __future__ import annotations

import importlib
import logging
import os
import shutil
import subprocess
import threading
from pathlib import Path
from typing import Any, Callable

from attrs import define

from stitch_lsp import __version__
from stitch_lsp.cancellation import CancelToken, ProgressEvent, Reporter
from stitch_lsp.jobs.binding import build_candidate
from stitch_lsp.jobs.cache import ResultCache, cache_key
from stitch_lsp.jobs.pairing import Pairing
from stitch_lsp.pipeline import Candidate
from stitch_lsp.child_env import tool_env
from stitch_lsp.settings import Settings
from stitch_lsp.verdict import DeviceInfo, Verdict, VerdictStatus

log = logging.getLogger(__name__)

# Test-only: "module:factory" of a stand-in for Verifier(settings, workdir). Never a user setting.
VERIFIER_ENV = "STITCH_TEST_VERIFIER"


@define
class CheckRequest:
    pairing: Pairing
    cu_source: str
    profile: bool = False
    sanitize: bool = False

    @property
    def kernel(self) -> str:
        return self.pairing.kernel


@define
class CheckResult:
    verdict: Verdict
    cached: bool = False
    key: str = ""


def verifier_factory() -> Callable[[Settings, Path], Any]:
    spec = os.environ.get(VERIFIER_ENV, "")
    if spec:
        module, _, attr = spec.partition(":")
        return getattr(importlib.import_module(module), attr or "Verifier")
    from stitch_lsp.verify.service import Verifier

    return Verifier


def nvcc_version(nvcc: str) -> str:
    path = shutil.which(nvcc) or nvcc
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=20,
                             env=tool_env()).stdout
    except (OSError, subprocess.TimeoutExpired):
        return "none"
    return out.strip().splitlines()[-1] if out.strip() else "unknown"


class KernelChecker:
    """One per workspace: owns the Verifier (created on first use) and the result cache."""

    def __init__(self, workspace: Path, settings: Settings) -> None:
        self.workspace = Path(workspace)
        self.settings = settings
        self.cache = ResultCache.for_workspace(self.workspace, settings.cache_max_mb)
        self._verifier: Any = None
        self._device: DeviceInfo | None | bool = False
        self._toolchain: dict[str, str] | None = None
        self._lock = threading.Lock()

    # -- settings and lifetime ------------------------------------------------------------
    def update_settings(self, settings: Settings) -> None:
        relevant = ("nvcc_path", "arch", "include_paths", "extra_flags", "gpu_index", "python")
        changed = any(getattr(settings, k) != getattr(self.settings, k) for k in relevant)
        self.settings = settings
        self.cache.max_bytes = int(settings.cache_max_mb * 1024 * 1024)
        if changed:
            self.close()

    def close(self) -> None:
        with self._lock:
            verifier, self._verifier = self._verifier, None
            self._device = False
            self._toolchain = None
        if verifier is not None:
            try:
                verifier.close()
            except Exception:
                log.exception("closing the Verifier failed")

    def verifier(self) -> Any:
        with self._lock:
            if self._verifier is None:
                workdir = self.workspace / ".stitch" / "work"
                self._verifier = verifier_factory()(self.settings, workdir)
            return self._verifier

    # -- what decides the answer ------------------------------------------------------------
    def device(self) -> DeviceInfo | None:
        if self._device is False:
            self._device = self.verifier().device_info()
        return self._device  # type: ignore[return-value]

    def known_device(self) -> DeviceInfo | None | bool:
        """The device if already asked this session (False when not yet)."""
        return self._device

    def toolchain(self) -> dict[str, str]:
        if self._toolchain is None:
            self._toolchain = {"stitch": __version__, "nvcc": nvcc_version(self.settings.nvcc_path)}
        return self._toolchain

    def candidate(self, request: CheckRequest) -> Candidate:
        return build_candidate(request.pairing, request.cu_source)

    def key(self, request: CheckRequest, device: DeviceInfo | None) -> str:
        s = self.settings
        return cache_key(
            "verify-kernel",
            task=request.pairing.reference.source,
            candidate=self.candidate(request).key(),
            gpu=device,
            toolchain=self.toolchain(),
            settings={
                "profile": request.profile,
                "sanitize": request.sanitize,
                "arch": s.arch,
                "extra_flags": s.extra_flags,
                "include_paths": s.include_paths,
                "compile_mode": s.compile_mode,
                "timing": "gpu-time-intervals-1",  # verdicts timed the old way are not answers any more
            },
        )

    def lookup(self, request: CheckRequest) -> CheckResult | None:
        """A cached verdict, when the device is already known (no worker is started for this)."""
        device = self._device
        if device is False:
            return None
        key = self.key(request, device)  # type: ignore[arg-type]
        verdict = self.cache.get(key, Verdict)
        if verdict is None:
            return None
        verdict.from_cache = True
        return CheckResult(verdict, cached=True, key=key)

    # -- the job ---------------------------------------------------------------------------------
    def run(self, request: CheckRequest, token: CancelToken, report: Reporter, *, use_cache: bool = True) -> CheckResult:
        """Answer from the cache, else verify (and store the answer). ``use_cache=False``: verify again."""
        report(ProgressEvent("preparing", f"{request.kernel} against {Path(request.pairing.reference.path).name}", 2))
        device = self.device()
        token.raise_if_cancelled()
        key = self.key(request, device)
        hit = self.cache.get(key, Verdict) if use_cache else None
        if hit is not None:
            hit.from_cache = True
            when = f", measured {hit.measured_at}" if hit.measured_at else ""
            report(ProgressEvent("cached", f"same kernel, reference, GPU and toolchain{when}", 100))
            return CheckResult(hit, cached=True, key=key)
        from stitch_lsp.contract.verify import VerifyOptions

        s = self.settings
        options = VerifyOptions(
            profile=request.profile,
            sanitize=request.sanitize,
            timeout_s=s.verify_timeout_s,
            gpu_index=s.gpu_index,
            compile_mode=s.compile_mode,
            use_cache=use_cache,  # --no-cache reaches the Verifier's own verdict cache and compiled baseline
        )
        verdict: Verdict = self.verifier().verify(
            request.pairing.reference.source, self.candidate(request), options, cancel=token, report=report
        )
        token.raise_if_cancelled()
        verdict.cache_key = key
        # Only answers about the kernel are worth keeping; a crash of the machinery is not.
        if verdict.status not in (VerdictStatus.CANCELLED, VerdictStatus.ERROR, VerdictStatus.NO_GPU, VerdictStatus.TIMEOUT):
            self.cache.put(key, verdict)
        # The Verifier may answer from its own verdict cache: that answer is cached too, and says so.
        return CheckResult(verdict, cached=verdict.from_cache, key=key)

    def timeout_s(self, request: CheckRequest) -> float:
        s = self.settings
        # A little beyond the Verifier's own limit (which reports itself): this one is for a stuck run.
        total = s.verify_timeout_s * 1.2 + 5.0
        if request.profile or request.sanitize:
            total += s.profile_timeout_s
        return total
