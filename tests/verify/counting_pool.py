"""The real Verifier (its verdict cache and all) over a worker pool that never starts a worker.

Test-only: ``STITCH_TEST_VERIFIER=tests.verify.counting_pool:make`` puts it behind
``stitch verify-kernel``. Every ``verify`` that reaches the pool appends a line to
``$COUNTING_POOL_LOG`` with the options the worker would get, so a test sees which
questions got past every cache, and what the worker was told about its own cache.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from stitch_lsp.serde import to_dict
from stitch_lsp.verdict import Correctness, DeviceInfo, Timing, TimingStats, Trial, Verdict, VerdictStatus
from stitch_lsp.verify.service import Verifier


class CountingPool:
    def __init__(self) -> None:
        self.events: list[str] = []

    def call_raw(self, kind: str, payload: Any, **_: Any) -> tuple[dict, bool]:
        if kind == "device_info":
            return {"device": to_dict(DeviceInfo(name="counting pool (CPU test)"))}, False
        log = os.environ.get("COUNTING_POOL_LOG")
        if log:
            with open(log, "a") as f:
                f.write(json.dumps({"kind": kind, "use_cache": payload.options.use_cache,
                                    "compile_mode": payload.options.compile_mode}) + "\n")
        verdict = Verdict(
            status=VerdictStatus.CORRECT, summary="correct (counting pool)",
            correctness=Correctness(status="passed", trials=[Trial(f"seed-{i}", True) for i in range(5)]),
            timing=Timing(status="measured", eager=TimingStats(median_ms=0.3), candidate=TimingStats(median_ms=0.15),
                          compiled=TimingStats(median_ms=0.07), speedup_vs_eager=2.0, speedup_vs_eager_ci=[1.98, 2.02],
                          speedup_vs_compile=0.47, speedup_vs_compile_ci=[0.46, 0.48], rounds=40, converged=True),
        )
        return to_dict(verdict), False

    def close(self) -> None:
        pass


def make(settings: Any, workdir: Path) -> Verifier:
    verifier = Verifier(settings, workdir)
    verifier.pool.close()
    verifier.pool = CountingPool()  # type: ignore[assignment]
    return verifier
