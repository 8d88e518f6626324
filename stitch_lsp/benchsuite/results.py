"""What a bench run records: one ``TaskResult`` per task, the run's ``RunInfo``, the ``Summary``.

Plain attrs classes serialised by ``stitch_lsp.serde``; each finished task is one
JSON file in the run directory (see ``store``), so a run can be resumed.
"""

from __future__ import annotations

from attrs import define, field

from stitch_lsp.pipeline import Candidate, Plan
from stitch_lsp.verdict import DeviceInfo, Verdict

# Statuses a task can end with, beyond the Verifier's own (VerdictStatus values).
NOT_COVERED = "not_covered"  # the Coder wrote nothing: the task is outside what it handles
CODER_ERROR = "coder_error"  # the Coder failed (API error, bad output, exception)
SHARD_CRASHED = "crashed"  # the process running the task died
TIMEOUT = "timeout"
INTERRUPTED = "interrupted"  # Ctrl-C or cancel while it ran: not recorded, rerun on --resume
ERROR = "error"


@define
class TaskResult:
    name: str
    status: str  # "correct", another VerdictStatus value, or one of the constants above
    reason: str = ""  # why it is not correct, in one line; notes when it is
    level: int | None = None
    tags: list[str] = field(factory=list)
    dtype: str = ""
    # The precision the task ran in (--precision: the model and the floating inputs cast, as KernelBench does).
    precision: str = ""
    coder: str = ""
    compiled: bool | None = None  # None: no candidate was compiled
    speedup_vs_eager: float | None = None  # GPU time (see Timing.measure), median of per-round ratios
    speedup_vs_compile: float | None = None
    speedup_vs_eager_ci: list[float] | None = None  # its 95 % interval [low, high]
    speedup_vs_compile_ci: list[float] | None = None
    compile_mode: str = ""  # torch.compile's mode for the baseline
    timing_notes: str = ""  # not converged, clocks moved, another process on the GPU
    eager_ms: float | None = None
    compile_ms: float | None = None  # torch.compile (compile_mode)
    candidate_ms: float | None = None
    bound: str = ""  # from the profile: memory | compute | latency; else the task's expected bound
    bound_source: str = ""  # "profile" | "task"
    pct_of_peak: float | None = None  # the profiled bottleneck's throughput, % of the device peak
    min_bytes: int | None = None  # fewest bytes the task must move (task index or plan)
    achieved_gbs: float | None = None  # min_bytes / candidate time (the timed call, host side included)
    # The candidate's kernels alone (their durations in the Nsight Compute profile, when it ran):
    # min_bytes / kernel time is the bandwidth its kernels reach, free of launch and host costs.
    kernel_us: float | None = None
    kernel_gbs: float | None = None
    kernels: int = 0  # candidate kernels profiled
    profile_note: str = ""  # what the profile shows about the bottleneck kernel, in one line
    hack_flags: list[str] = field(factory=list)
    gpu: str = ""  # the slot it ran on ("0", "1", ... or "cpu")
    seconds: float = 0.0  # wall time of the whole task (coder + verifier)
    steps: dict[str, float] = field(factory=dict)  # seconds per step ("timing: torch.compile", ...): stage_clock
    summary: str = ""  # the Verifier's own one-line summary
    # Why the task ran more than once: each time the worker running it was lost (a cluster node
    # down, its actor killed) and the task went back to the queue. Empty for a task that ran once.
    retried: list[str] = field(factory=list)
    # Set when the GEMM family's candidate failed the Verifier and the one with the GEMM on cuBLAS was
    # generated and judged as well: what happened (the row's figures are the judged candidate's).
    gemm_fallback: str = ""

    @property
    def correct(self) -> bool:
        return self.status == "correct"


def failed_result(task, status: str, reason: str, *, coder: str, gpu: str = "", seconds: float = 0.0) -> TaskResult:
    """The result of a task that ended without a verdict (crashed, timed out, lost, raised).

    ``task`` is a ``tasks.BenchTask`` (not imported here: results stay free of task discovery).
    """
    return TaskResult(name=task.name, status=status, reason=reason, level=task.level, tags=list(task.tags),
                      dtype=task.dtype, coder=coder, gpu=gpu, seconds=seconds, bound=task.expected_bound,
                      bound_source="task" if task.expected_bound else "")


@define
class TaskDetail:
    """Everything behind a TaskResult, kept next to it for reading later."""

    name: str
    message: str = ""
    plan: Plan | None = None
    candidate: Candidate | None = None
    verdict: Verdict | None = None


@define
class GpuInfo:
    slot: str  # CUDA_VISIBLE_DEVICES value the worker ran with
    device: DeviceInfo | None = None
    copy_bandwidth_gbs: float | None = None  # measured in this run
    copy_method: str = ""
    message: str = ""  # why it could not be measured


@define
class FastP:
    p: float
    vs_eager: float | None  # fraction of ALL tasks correct and faster than p x eager
    vs_compile: float | None


@define
class Summary:
    tasks: int  # all tasks selected for the run (the denominator of every rate)
    ran: int  # tasks with a result
    compiled: int
    correct: int
    compile_rate: float | None
    correct_rate: float | None
    fast_p: list[FastP] = field(factory=list)
    geomean_vs_eager: float | None = None  # over correct tasks with a finite speedup
    geomean_vs_compile: float | None = None
    geomean_count: int = 0  # correct tasks with a finite speedup over eager
    geomean_compile_count: int = 0  # ... over torch.compile (its baseline can fail on its own)
    copy_bandwidth_gbs: float | None = None
    memory_bound: int = 0  # correct, memory-bound tasks with an achieved bandwidth
    memory_bound_at_80pct: int = 0  # of those, at >= 80% of the measured copy bandwidth
    statuses: dict[str, int] = field(factory=dict)
    # Tasks the Coder claimed (wrote a kernel for), and how many of those are correct.
    covered: int = 0
    covered_correct: int = 0


@define
class RunInfo:
    run_id: str
    tasks_dir: str
    command: str
    coder: str
    started: str
    finished: str = ""
    interrupted: bool = False
    stopped_by_budget: bool = False
    gpus: list[GpuInfo] = field(factory=list)
    filters: str = ""
    stitch_version: str = ""
    executor: str = ""  # where the tasks ran: "local", or the Ray cluster and its GPUs
    precision: str = ""  # fp32 | bf16 | fp16 ("" in runs recorded before the option: fp32)


@define
class BenchReport:
    run: RunInfo
    summary: Summary
    results: list[TaskResult] = field(factory=list)
    not_run: list[str] = field(factory=list)  # selected tasks with no result (interrupted, budget)
