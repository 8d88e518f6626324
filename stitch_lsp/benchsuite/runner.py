"""The real per-task work, run inside a shard: the fuse pipeline (trace → plan → Coder →
Verifier) on one task file, turned into a TaskResult; and ``measure_gpu``.

This is the default ``--backend`` of ``stitch_lsp.benchsuite.shard``. One Verifier per
shard process, reused for every task, so its worker (torch, the CUDA context, compile
caches) is paid once per GPU.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import attrs

from stitch_lsp.benchsuite import bandwidth
from stitch_lsp.benchsuite.outcome import to_detail, to_result
from stitch_lsp.benchsuite.results import GpuInfo, TaskDetail, TaskResult
from stitch_lsp.benchsuite.tasks import BenchTask
from stitch_lsp.cancellation import CancelToken, Reporter
from stitch_lsp.pipeline import Task
from stitch_lsp.settings import Settings


@attrs.define
class _State:
    workdir: Path = attrs.field(factory=lambda: Path(".stitch") / "bench" / "work")
    profile: bool = True
    sanitize: bool = False
    verifier: Any = None


_state = _State()


def configure(workdir: str = "", profile: bool = True, sanitize: bool = False) -> None:
    """Called once by the shard with the run's choices, before any task."""
    if workdir:
        _state.workdir = Path(workdir)
    _state.profile = profile
    _state.sanitize = sanitize


class OptionsVerifier:
    """The Verifier, with the bench's profile / sanitize choice applied to every job it runs."""

    def __init__(self, inner: Any, **changes: Any) -> None:
        self._inner = inner
        self._changes = changes

    def verify(self, reference_source: str, candidate: Any, options: Any = None, **kwargs: Any) -> Any:
        from stitch_lsp.verify.options import VerifyOptions

        options = attrs.evolve(options or VerifyOptions(), **self._changes)
        return self._inner.verify(reference_source, candidate, options, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def verifier(settings: Settings) -> Any:
    if _state.verifier is None:
        from stitch_lsp.verify.service import Verifier

        _state.workdir.mkdir(parents=True, exist_ok=True)
        _state.verifier = OptionsVerifier(Verifier(settings, _state.workdir),
                                          profile=_state.profile, sanitize=_state.sanitize)
    return _state.verifier


def pipeline_task(task: BenchTask) -> Task:
    return Task(
        name=task.name,
        source=Path(task.path).read_text(encoding="utf-8"),
        origin_path=None,  # a suite task: nothing to edit, no kernel files written into a workspace
        shape_source="get_inputs",
    )


def run_task(task: BenchTask, settings: Settings, coder: str, cancel: CancelToken,
             report: Reporter) -> tuple[TaskResult, TaskDetail]:
    try:
        from stitch_lsp.agents.fuse_service import fuse_task
    except ImportError as exc:
        raise RuntimeError(f"the fuse service is not available in this build ({exc})") from exc
    checker = verifier(settings)
    outcome = fuse_task(pipeline_task(task), settings, coder=coder, verifier=checker, cancel=cancel,
                        report=report, workdir=_state.workdir, device=checker.device_info())
    result = to_result(
        task,
        coder=coder,
        plan=getattr(outcome, "plan", None),
        candidate=getattr(outcome, "candidate", None),
        verdict=getattr(outcome, "verdict", None),
        message=str(getattr(outcome, "message", "") or ""),
    )
    return result, to_detail(task, outcome)


def measure_gpu(settings: Settings, slot: str, cancel: CancelToken) -> GpuInfo:
    try:
        checker = verifier(settings)
    except ImportError as exc:
        return GpuInfo(slot=slot, message=f"copy bandwidth not measured: no Verifier in this build ({exc})")
    info = bandwidth.measure_gpu(checker.pool, slot, cancel)
    if info.device is None:
        info.device = checker.device_info()
    return info
