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

from stitch_lsp.benchsuite import gpus
from stitch_lsp.benchsuite.outcome import to_detail, to_result
from stitch_lsp.benchsuite.results import GpuInfo, TaskDetail, TaskResult
from stitch_lsp.benchsuite.stats import COPY_TARGET, GOAL_VS_COMPILE, GOAL_VS_EAGER, valid_speedup
from stitch_lsp.benchsuite.tasks import BenchTask
from stitch_lsp.cancellation import CancelToken, ProgressEvent, Reporter
from stitch_lsp.pipeline import Task
from stitch_lsp.task.precision import cast_source, dtype_of, precision_of
from stitch_lsp.settings import Settings


PROFILE_MODES = ("all", "misses", "none")


def library_miss(verdict: Any, candidate: Any) -> str:
    """Why a candidate that a library call dominates misses, from what the run already has: the library's share
    of the candidate's GPU time (the profiler's kernel list) and the convolution layout the Coder chose."""
    kernels = getattr(getattr(verdict, "streams", None), "kernels", None) or []
    total = sum(k.duration_us for k in kernels)
    ours = sum(k.duration_us for k in kernels if k.name.startswith("stitch_"))
    library = sum(k.duration_us for k in kernels if _library_kernel(k.name))
    parts = []
    if total > 0 and library > 0:
        parts.append(f"cuDNN / cuBLAS kernels {100 * library / total:.0f}% of its GPU time, "
                     f"the kernels written here {100 * ours / total:.0f}%")
    layouts = [n.split(": ", 1)[1] for n in getattr(candidate, "notes", []) or []
               if ": convolution in " in n and n.split(": ", 1)[1].startswith("convolution in ")]
    parts += layouts[:1]
    return ("a GEMM / convolution library call dominates" + (f" ({'; '.join(parts)})" if parts else "")
            + ": the kernels written here are its tail")


def _library_kernel(name: str) -> bool:
    low = name.lower()
    return not name.startswith("stitch_") and any(k in low for k in ("cudnn", "xmma", "gemm", "cutlass", "cublas",
                                                                    "conv", "wgrad", "dgrad", "fprop"))


@attrs.define
class _State:
    workdir: Path = attrs.field(factory=lambda: Path(".stitch") / "bench" / "work")
    profile: str = "all"
    sanitize: bool = False
    verifier: Any = None
    copy_gbs: float | None = None  # this GPU's, once measured
    no_cache: bool = False
    precision: str = "fp32"  # every task cast to it (stitch_lsp.task.precision)


_state = _State()


def configure(workdir: str = "", profile: str | bool = "all", sanitize: bool = False, no_cache: bool = False,
              precision: str = "fp32") -> None:
    """Called once by the shard with the run's choices, before any task."""
    _state.no_cache = no_cache
    dtype_of(precision)  # a bad name fails here, before any task
    _state.precision = precision
    if workdir:
        _state.workdir = Path(workdir)
    _state.profile = {True: "all", False: "none"}.get(profile, profile) if isinstance(profile, bool) else profile
    if _state.profile not in PROFILE_MODES:
        raise ValueError(f"profile mode {profile!r}: want one of {', '.join(PROFILE_MODES)}")
    _state.sanitize = sanitize


def misses_goal(verdict: Any, task: BenchTask | None, copy_gbs: float | None) -> bool:
    """A correct candidate short of the suite's goals: slower than 1.5x eager or 1.1x torch.compile,
    or memory-bound below 80% of the measured copy bandwidth. The profile then says why."""
    from stitch_lsp.verdict import VerdictStatus

    if verdict.status is not VerdictStatus.CORRECT:
        return False
    timing = verdict.timing
    if not valid_speedup(timing.speedup_vs_eager) or timing.speedup_vs_eager < GOAL_VS_EAGER:
        return True
    if not valid_speedup(timing.speedup_vs_compile) or timing.speedup_vs_compile < GOAL_VS_COMPILE:
        return True
    if task is not None and task.expected_bound == "memory" and task.min_bytes and copy_gbs and timing.candidate:
        achieved = task.min_bytes / (timing.candidate.median_ms * 1e-3) / 1e9
        return achieved < COPY_TARGET * copy_gbs
    return False


def library_bound(candidate: Any) -> bool:
    """The candidate calls a GEMM, a convolution or attention: a compute-bound library call that the
    template Coder's kernels (its tail) cannot speed up."""
    from stitch_lsp.plan.library_calls import library_kind

    calls = list(getattr(candidate, "library_calls", None) or [])
    return any(library_kind(label.split(" ")[0]) in ("gemm", "conv", "attention") for label in calls)


class OptionsVerifier:
    """The Verifier, with the bench's profile / sanitize choice applied to every job it runs.

    Profile mode "misses" verifies without Nsight Compute and profiles afterwards only the
    correct candidates that miss a goal (a fraction of the cost of profiling everything).
    """

    def __init__(self, inner: Any, *, profile: str = "all", sanitize: bool = False, no_cache: bool = False) -> None:
        self._inner = inner
        self.profile_mode = profile
        self.sanitize = sanitize
        self.no_cache = no_cache
        self.task: BenchTask | None = None  # the task being run, for the goals
        self.copy_gbs: float | None = None

    def verify(self, reference_source: str, candidate: Any, options: Any = None, **kwargs: Any) -> Any:
        from stitch_lsp.contract.verify import VerifyOptions

        options = attrs.evolve(options or VerifyOptions(), profile=self.profile_mode == "all", sanitize=self.sanitize,
                               precision=precision_of(reference_source))
        if self.no_cache:
            options = attrs.evolve(options, use_cache=False)
        verdict = self._inner.verify(reference_source, candidate, options, **kwargs)
        if self.profile_mode == "misses" and misses_goal(verdict, self.task, self.copy_gbs):
            if library_bound(candidate):
                # The miss is the library's (its GEMM or convolution takes most of the time): Nsight Compute
                # would replay that kernel for half a minute to say so.
                verdict.profile.message = library_miss(verdict, candidate)
            else:
                report = kwargs.get("report")
                if report is not None:
                    report(ProgressEvent("profiling", "Nsight Compute on the candidate (a goal missed)"))
                verdict.profile = self._profile(reference_source, candidate, options, kwargs.get("cancel"))
        return verdict

    def _profile(self, reference_source: str, candidate: Any, options: Any, cancel: Any) -> Any:
        # The candidate's kernels say why it misses; the reference's profile would double the time.
        from stitch_lsp.verify import nsight
        from stitch_lsp.contract.verify import VerifyJob
        from stitch_lsp.verify.service import materialise

        ref_path, cand_path, cuda_paths = materialise(self._inner.workdir, reference_source, candidate)
        job = VerifyJob(reference_path=str(ref_path), candidate_path=str(cand_path),
                        options=attrs.evolve(options, profile=True), cuda_files=[str(p) for p in cuda_paths])
        return nsight.profile(self._inner.settings, job, self._inner.workdir, cancel=cancel, roles=("candidate",))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def verifier(settings: Settings) -> Any:
    if _state.verifier is None:
        from stitch_lsp.verify.service import Verifier

        _state.workdir.mkdir(parents=True, exist_ok=True)
        _state.verifier = OptionsVerifier(Verifier(settings, _state.workdir),
                                          profile=_state.profile, sanitize=_state.sanitize, no_cache=_state.no_cache)
    return _state.verifier


def pipeline_task(task: BenchTask, precision: str = "fp32") -> Task:
    return Task(
        name=task.name,
        source=cast_source(Path(task.path).read_text(encoding="utf-8"), precision),
        origin_path=None,  # a suite task: nothing to edit, no kernel files written into a workspace
        shape_source="get_inputs",
    )


def run_task(task: BenchTask, settings: Settings, coder: str, cancel: CancelToken,
             report: Reporter) -> tuple[TaskResult, TaskDetail]:
    try:
        from stitch_lsp.fuse.service import fuse_task
    except ImportError as exc:
        raise RuntimeError(f"the fuse service is not available in this build ({exc})") from exc
    checker = verifier(settings)
    checker.task, checker.copy_gbs = task, _state.copy_gbs
    outcome = fuse_task(pipeline_task(task, _state.precision), settings, coder=coder, verifier=checker, cancel=cancel,
                        report=report, workdir=_state.workdir, device=checker.device_info(),
                        verify_library_only=True)
    result = to_result(
        task,
        coder=coder,
        plan=getattr(outcome, "plan", None),
        candidate=getattr(outcome, "candidate", None),
        verdict=getattr(outcome, "verdict", None),
        message=str(getattr(outcome, "message", "") or ""),
        gemm_fallback="; ".join(filter(None, [str(getattr(outcome, "attention_fallback", "") or ""),
                                              str(getattr(outcome, "gemm_fallback", "") or ""),
                                              str(getattr(outcome, "layout_fallback", "") or "")])),
    )
    result.precision = _state.precision
    return result, to_detail(task, outcome)


def verify(settings: Settings, reference_source: str, candidate: Any, options: Any, cancel: CancelToken,
           report: Reporter) -> Any:
    """One candidate's verdict, with the caller's options (not the bench's profile / sanitize choice)."""
    checker = verifier(settings)
    return checker._inner.verify(reference_source, candidate, options, cancel=cancel, report=report)


def measure_gpu(settings: Settings, slot: str, cancel: CancelToken) -> GpuInfo:
    try:
        checker = verifier(settings)
    except ImportError as exc:
        return GpuInfo(slot=slot, message=f"copy bandwidth not measured: no Verifier in this build ({exc})")
    info = gpus.measure_gpu(checker.pool, slot, cancel)
    _state.copy_gbs = info.copy_bandwidth_gbs
    if info.device is None:
        info.device = checker.device_info()
    return info
