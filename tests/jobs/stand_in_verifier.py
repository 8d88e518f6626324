"""A stand-in for ``stitch_lsp.verify.service.Verifier`` on machines without a GPU.

Test-only: the server loads it when ``STITCH_TEST_VERIFIER=tests.jobs.stand_in_verifier:StandInVerifier``.
Each ``verify`` runs a real child process (a sleeping Python) that the job's
CancelToken kills, reports progress stages, and answers with a fixed Verdict
whose figures are the H100's for ``fused_gelu_scale`` (tests/fixtures/h100).

Environment:
- ``STAND_IN_SECONDS``: how long the worker child lives (default 0.3).
- ``STAND_IN_LOG``: a JSON-lines file; each run appends ``start`` (with the
  child's pid) and ``end`` / ``killed`` records.
- ``STAND_IN_BUSY=1``: the child spins a CPU core instead of sleeping (as a real
  worker's host loop does while timing), and progress is reported ten times a
  second (the latency benchmark's "while a GPU job runs").
Markers in the kernel's source: ``STITCH_TEST_WRONG`` → an incorrect verdict,
``STITCH_TEST_SANITIZER`` → a memcheck finding at that line.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

from stitch_lsp.cancellation import ProgressEvent
from stitch_lsp.jobs.process import kill_tree
from stitch_lsp.verdict import (
    Correctness,
    DeviceInfo,
    KernelProfile,
    NcuRule,
    Profile,
    Sanitizer,
    SanitizerFinding,
    Timing,
    TimingStats,
    Trial,
    Verdict,
    VerdictStatus,
)

DEVICE = DeviceInfo(name="Stand-in GPU (CPU test)", compute_capability="9.0", sm_count=132, driver="test", cuda="13.0", torch="cpu")


def _log(record: dict) -> None:
    path = os.environ.get("STAND_IN_LOG")
    if path:
        with open(path, "a") as f:
            f.write(json.dumps(record) + "\n")


class StandInVerifier:
    def __init__(self, settings, workdir: Path) -> None:
        self.settings = settings
        self.workdir = Path(workdir)

    def device_info(self) -> DeviceInfo:
        return DEVICE

    def close(self) -> None:
        pass

    def verify(self, reference_source, candidate, options=None, *, cancel=None, report=lambda e: None) -> Verdict:
        seconds = float(os.environ.get("STAND_IN_SECONDS", "0.3"))
        m = re.search(r"^_KERNEL = '([^']+)'", candidate.module_source, re.M)
        kernel = m.group(1) if m else "kernel"
        compile(candidate.module_source, "candidate.py", "exec")  # the binding must at least be Python
        busy = os.environ.get("STAND_IN_BUSY") == "1"
        child = (
            f"import time\nend = time.monotonic() + {seconds}\nwhile time.monotonic() < end: pass"
            if busy else f"import time; time.sleep({seconds})"
        )
        proc = subprocess.Popen([sys.executable, "-c", child], start_new_session=True)
        _log({"event": "start", "pid": proc.pid, "kernel": kernel, "profile": bool(getattr(options, "profile", False))})
        unregister = cancel.on_cancel(lambda: kill_tree(proc)) if cancel is not None else (lambda: None)
        stages = [("compiling", "NVRTC", 10), ("checking", "5 seeds, adversarial inputs", 40), ("timing", "eager, torch.compile, candidate", 70)]
        started = time.monotonic()
        ticks = 0
        try:
            while proc.poll() is None:
                elapsed = time.monotonic() - started
                while stages and elapsed >= seconds * stages[0][2] / 100:
                    stage, msg, pct = stages.pop(0)
                    report(ProgressEvent(stage, msg, pct))
                if busy and elapsed * 10 >= ticks:
                    ticks += 1
                    report(ProgressEvent("timing", f"iteration {ticks}", min(99, int(100 * elapsed / seconds))))
                time.sleep(0.02)
        finally:
            unregister()
        if cancel is not None and cancel.cancelled:
            _log({"event": "killed", "pid": proc.pid, "kernel": kernel})
            return Verdict(status=VerdictStatus.CANCELLED, summary="cancelled")
        for stage, msg, pct in stages:
            report(ProgressEvent(stage, msg, pct))
        _log({"event": "end", "pid": proc.pid, "kernel": kernel})
        return self._verdict(kernel, candidate, options)

    def _verdict(self, kernel, candidate, options) -> Verdict:
        source = "\n".join(candidate.cuda_sources.values())
        trials = [Trial(f"seed-{i}", True) for i in range(5)] + [Trial("adversarial-nan", True, kind="adversarial")]
        status = VerdictStatus.CORRECT
        if "STITCH_TEST_WRONG" in source:
            status = VerdictStatus.INCORRECT
            trials.append(Trial("odd-shape", False, kind="shape", max_abs_err=0.75, mismatches=512, detail="1023x1001"))
        sanitizer = Sanitizer()
        for i, line in enumerate(source.splitlines()):
            if "STITCH_TEST_SANITIZER" in line:
                name = next(iter(candidate.cuda_sources))
                sanitizer = Sanitizer(status="findings", findings=[SanitizerFinding(
                    tool="memcheck", kind="Invalid __global__ write of size 4", message="out of bounds by 4 bytes",
                    kernel=kernel, file=name, line=i)])
        profile = Profile()
        if getattr(options, "profile", False):
            profile = Profile(status="profiled", kernels=[KernelProfile(
                name=kernel, duration_us=63.65, sm_throughput_pct=53.10, memory_throughput_pct=55.49,
                dram_throughput_pct=55.49, dram_bandwidth_gbs=1864.0, achieved_occupancy_pct=74.59,
                theoretical_occupancy_pct=100.0, occupancy_limiter="warps", registers=16, spill_bytes=0,
                grid="(65536, 1, 1)", block="(256, 1, 1)", arithmetic_intensity=1.2, ridge_point=20.0,
                rules=[NcuRule("AchievedOccupancy", "theoretical 100.0% vs achieved 74.6%", "OPT", 25.41)],
            )])
        return Verdict(
            status=status,
            summary="correct on 6 checks; 2.31x over eager, 1.05x over torch.compile" if status is VerdictStatus.CORRECT else "1 of 7 checks failed",
            device=DEVICE,
            correctness=Correctness(status="passed" if status is VerdictStatus.CORRECT else "failed", trials=trials, dtype="float32"),
            timing=Timing(
                status="measured",
                eager=TimingStats(median_ms=0.147, samples=50),
                compiled=TimingStats(median_ms=0.0668, samples=50),
                candidate=TimingStats(median_ms=0.0636, samples=50),
                speedup_vs_eager=2.31,
                speedup_vs_compile=1.05,
                method="stand-in",
            ),
            profile=profile,
            sanitizer=sanitizer,
        )
