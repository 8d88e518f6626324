"""The Verifier's verdict: what was checked, what was measured, what was found.

JSON-serialisable through ``stitch_lsp.serde`` (``to_json`` / ``from_json``).
The same object is printed by ``stitch verify``, cached by the job system and
shown by the editor. Every part says whether it ran: a check that did not run is
``status="skipped"`` with the reason, never silently "passed".
"""

from __future__ import annotations

import enum

from attrs import define, field

from stitch_lsp.findings import Finding


class VerdictStatus(str, enum.Enum):
    CORRECT = "correct"  # compiled, every trial passed, no hacking flag
    INCORRECT = "incorrect"  # some trial failed
    COMPILE_ERROR = "compile_error"
    HACKING = "hacking"  # an anti-hacking flag fired: never offered, whatever its speed
    UNVERIFIABLE = "unverifiable"  # reference output constant / near zero across seeds
    CRASHED = "crashed"  # the worker died (fault, segfault, abort)
    TIMEOUT = "timeout"
    OUT_OF_MEMORY = "out_of_memory"
    TOO_LARGE = "too_large"  # the memory plan found no room for the task on this GPU: nothing ran
    NO_GPU = "no_gpu"
    BAD_INPUT = "bad_input"  # no ModelNew, wrong signature, reference raises, ...
    CANCELLED = "cancelled"
    ERROR = "error"  # anything else, with a message

    @property
    def passed(self) -> bool:
        return self is VerdictStatus.CORRECT


@define
class DeviceInfo:
    name: str = ""
    index: int = 0
    compute_capability: str = ""  # "9.0"
    sm_count: int = 0
    driver: str = ""
    cuda: str = ""
    torch: str = ""
    # Measured, not datasheet: device-to-device copy (bytes read + written) and dense GEMM.
    copy_bandwidth_gbs: float | None = None
    peak_tflops_fp32: float | None = None


@define
class KernelResources:
    """ptxas' figures for one kernel (``-Xptxas -v``)."""

    name: str  # demangled name as written in the source, e.g. "softmax_kernel"
    mangled: str = ""
    registers: int = 0
    shared_bytes: int = 0
    stack_bytes: int = 0
    spill_stores: int = 0
    spill_loads: int = 0
    constant_bytes: int = 0
    line: int | None = None  # 0-based line of the __global__ definition, where known


@define
class CompileResult:
    ok: bool
    backend: str = ""  # "nvrtc", "load_inline", "nvcc"
    seconds: float = 0.0
    cached: bool = False
    diagnostics: list[Finding] = field(factory=list)
    kernels: list[KernelResources] = field(factory=list)
    log: str = ""


@define
class Float64Judgement:
    """A trial that failed against eager, judged again against a float64 run of the reference on the same
    inputs: each finite value may be off the float64 result by the dtype's tolerance plus
    ``eager_multiple`` times eager's own error at that element; NaN / ±Inf must still sit where eager's are.
    """

    passed: bool = False
    candidate_max_abs_err: float | None = None  # against the float64 run
    eager_max_abs_err: float | None = None  # eager's own, against the float64 run
    mismatches: int = 0  # values over that bound, NaN / ±Inf misplaced included
    eager_multiple: float = 2.0
    message: str = ""  # why it could not be judged so (the judgement against eager then stands)


@define
class Trial:
    """One correctness check: a seed, an adversarial case, an ordering, a shape."""

    name: str  # "seed-1", "adversarial-nan", "odd-shape", "candidate-before-reference", ...
    passed: bool
    kind: str = "random"  # random | adversarial | shape | order | mutation | poison | determinism
    max_abs_err: float | None = None  # against eager
    max_rel_err: float | None = None
    mismatches: int = 0
    detail: str = ""
    # Set when the comparison with eager failed and the trial was judged against float64 (then ``passed``
    # is that judgement's).
    float64: Float64Judgement | None = None
    # Output values not judged: an adversarial trial with finite inputs where the reference is not finite
    # (it overflowed its dtype there, so it defines nothing); the detail says so.
    left_out: int = 0


@define
class Correctness:
    status: str = "skipped"  # passed | failed | unverifiable | skipped | error
    trials: list[Trial] = field(factory=list)
    atol: float = 0.0
    rtol: float = 0.0
    dtype: str = ""
    message: str = ""
    # Checks that did not run, each with the reason ("second shape: ...", "adversarial-nan: ...").
    not_checked: list[str] = field(factory=list)

    @property
    def failed_trials(self) -> list[Trial]:
        return [t for t in self.trials if not t.passed]


@define
class TimingStats:
    median_ms: float
    p10_ms: float = 0.0
    p90_ms: float = 0.0
    min_ms: float = 0.0
    samples: int = 0

    @property
    def spread(self) -> float:
        """Relative spread (p90 - p10) / median."""
        return (self.p90_ms - self.p10_ms) / self.median_ms if self.median_ms else 0.0


@define
class ClockNotes:
    """The GPU's state around the timing run (NVML), and what in it makes the ratios less repeatable."""

    source: str = ""  # "NVML" | "nvidia-smi" | "" (not recorded)
    sm_mhz: list[int] = field(factory=list)  # SM clock at each snapshot (before, after the rounds)
    mem_mhz: list[int] = field(factory=list)
    sm_max_mhz: int | None = None
    other_processes: list[str] = field(factory=list)
    flagged: bool = False  # a clock moved, the driver throttled, or another process shared the GPU
    notes: list[str] = field(factory=list)


# What a speedup is a ratio of.
GPU_TIME = "gpu_time"  # device time of calls queued back to back (host launch cost hidden)
CALL_LATENCY = "call_latency"  # host clock around one synchronised call (host cost included)


@define
class Timing:
    status: str = "skipped"  # measured | skipped | error
    # GPU time of each contender (calls queued back to back behind a blocking kernel, L2 flushed).
    eager: TimingStats | None = None
    compiled: TimingStats | None = None  # torch.compile, in ``compile_mode``
    candidate: TimingStats | None = None
    # The headline ratios: medians of per-round ratios of ``measure``, with their 95 % intervals [low, high].
    speedup_vs_eager: float | None = None
    speedup_vs_compile: float | None = None
    speedup_vs_eager_ci: list[float] | None = None
    speedup_vs_compile_ci: list[float] | None = None
    measure: str = GPU_TIME
    # Call latency (host included) of each contender, and its ratios, beside the headline.
    eager_latency: TimingStats | None = None
    compiled_latency: TimingStats | None = None
    candidate_latency: TimingStats | None = None
    latency_vs_eager: float | None = None
    latency_vs_compile: float | None = None
    latency_vs_eager_ci: list[float] | None = None
    latency_vs_compile_ci: list[float] | None = None
    compile_mode: str = "default"  # torch.compile's mode for the baseline
    compile_reused: bool = False  # the compiled baseline came from an earlier job in this worker
    launch: str = ""  # how GPU-time calls were issued ("queued behind a blocking kernel", "host-bound")
    rounds: int = 0
    converged: bool = False  # every ratio's interval reached the target before the time cap
    ci_target: float = 0.015  # relative half-width sampling aimed for
    clocks: ClockNotes | None = None
    host_clock_ok: bool = True  # host clock agrees with CUDA events (no hidden side-stream work)
    suspicious: bool = False  # > 10x: extra scrutiny ran
    method: str = ""  # how it was measured, one line
    message: str = ""


@define
class NcuRule:
    name: str
    message: str
    rule_type: str = ""  # "OPT", "WRN", "INF"
    estimated_speedup_pct: float | None = None


@define
class KernelProfile:
    name: str
    role: str = "candidate"  # candidate | reference
    duration_us: float | None = None
    sm_throughput_pct: float | None = None
    memory_throughput_pct: float | None = None
    dram_throughput_pct: float | None = None
    dram_bytes: float | None = None
    dram_bandwidth_gbs: float | None = None
    achieved_occupancy_pct: float | None = None
    theoretical_occupancy_pct: float | None = None
    occupancy_limiter: str = ""
    registers: int | None = None
    shared_bytes: int | None = None
    spill_bytes: int | None = None
    grid: str = ""
    block: str = ""
    flops: float | None = None
    arithmetic_intensity: float | None = None  # FLOP / DRAM byte
    ridge_point: float | None = None  # FLOP / byte where this GPU turns compute-bound
    bound: str = ""  # memory | compute | latency
    rules: list[NcuRule] = field(factory=list)


@define
class Profile:
    status: str = "skipped"  # profiled | skipped | error
    kernels: list[KernelProfile] = field(factory=list)
    message: str = ""
    command: str = ""


@define
class SanitizerFinding:
    tool: str  # memcheck | racecheck | initcheck | synccheck
    kind: str  # "Invalid __global__ write of size 4", "Race reported between ...", ...
    message: str
    kernel: str = ""
    file: str = ""
    line: int | None = None  # 0-based, in the candidate's source


@define
class Sanitizer:
    status: str = "skipped"  # clean | findings | skipped | error
    findings: list[SanitizerFinding] = field(factory=list)
    message: str = ""


@define
class HackFlag:
    """An anti-hacking finding. Any flag keeps a candidate from being offered."""

    code: str  # "HACK001", ...
    message: str
    evidence: str = ""
    line: int | None = None  # 0-based line in the candidate, where static
    dynamic: bool = False
    # A static flag that only says the candidate uses streams: the run's stream check
    # (``Verdict.streams``) settles it; honest streams joined back to the caller's pass.
    stream_use: bool = False


@define
class RubricScore:
    dimension: str  # anti_hacking | cuda_engineering | operator_coverage | skill_compliance
    score: int  # 1..5
    reasons: list[str] = field(factory=list)
    judge: str = "rules"  # rules | model


@define
class Usage:
    """LLM tokens and cost for a job (zero for the template Coder)."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    cost_usd: float = 0.0
    rounds: int = 0


@define
class MemoryPhase:
    """What one phase of a verification needs on the GPU, by the plan, and what it used."""

    name: str  # trials | second_shape | accuracy | timing
    need_bytes: int = 0
    runs: bool = True
    note: str = ""  # why it is smaller (fewer input sets) or why it does not run
    # Measured: the most the caching allocator held from the GPU while it ran. The phase starts
    # with the cache emptied; freed blocks it keeps for reuse count too (it hands them back when
    # an allocation would fail), so this can exceed ``need_bytes``, which counts live tensors.
    peak_bytes: int | None = None


@define
class MemoryPlan:
    """The Verifier's memory plan, made from the traced shapes before anything runs.

    Sizes come from a run of the reference on the ``meta`` device (no memory, no
    compute): the bytes of one input set, of the outputs, and the most that is live
    at once inside the reference's forward. ``peak_bytes`` is measured.
    """

    status: str = "skipped"  # planned | too_large | skipped
    traced: bool = False  # sizes from the meta trace (False: estimated from the inputs)
    gpu_total_bytes: int = 0
    free_bytes: int = 0  # free on the GPU when the plan was made
    budget_bytes: int = 0  # what the plan may use: free less a reserve for workspaces and fragmentation
    input_bytes: int = 0  # one input set
    output_bytes: int = 0
    forward_peak_bytes: int = 0  # most live at once in the reference's forward, its outputs included
    param_bytes: int = 0  # the reference's parameters and buffers (the candidate gets a copy)
    timing_input_sets: int = 0  # fresh input sets the timing rotates among
    compile_baseline: bool = True  # room for torch.compile's baseline in the timing
    compare_chunk_elements: int = 0  # comparisons run over slices this long: no full-size fp64 copies
    phases: list[MemoryPhase] = field(factory=list)
    # Measured over the whole job: the most device memory the caching allocator held at once
    # (what the GPU had to give), and the most in live tensors (poisoning fills free cached
    # blocks before each candidate call, so this comes close to the first).
    peak_bytes: int | None = None
    peak_allocated_bytes: int | None = None
    message: str = ""


@define
class Accuracy:
    """Error against a float64 run of the reference, on the first seed, for eager and the candidate.

    ``ratio`` is the candidate's max error over eager's (each floored at one unit of the
    output dtype's epsilon times the output's RMS, so exact results compare as 1x, not 0/0).
    """

    status: str = "skipped"  # measured | skipped | error
    seed: int | None = None
    reference_dtype: str = ""  # the dtype the float64 run's outputs came back in
    eager_max_abs_err: float | None = None
    candidate_max_abs_err: float | None = None
    eager_mean_abs_err: float | None = None
    candidate_mean_abs_err: float | None = None
    ratio: float | None = None  # candidate error / eager error (max abs, floored)
    less_accurate: bool = False  # ratio over LESS_ACCURATE_RATIO: a rubric warning, even inside tolerance
    message: str = ""


LESS_ACCURATE_RATIO = 4.0


@define
class StreamKernel:
    """One kernel (or copy) that ``ModelNew.forward`` ran, as the profiler saw it."""

    name: str
    stream: int  # the profiler's stream id (not a cudaStream_t handle)
    duration_us: float = 0.0
    joined: bool = True  # on the caller's stream, or joined back to it before forward returned


@define
class StreamCheck:
    """Which stream each kernel of one ``forward`` ran on, and whether side streams were joined."""

    status: str = "skipped"  # checked | skipped | error
    current_stream: int | None = None  # the caller's stream, as the profiler names it
    kernels: list[StreamKernel] = field(factory=list)
    span_us: float | None = None  # first kernel start to last kernel end, on any stream
    message: str = ""

    @property
    def streams(self) -> list[int]:
        return sorted({k.stream for k in self.kernels})

    @property
    def unjoined(self) -> list[StreamKernel]:
        return [k for k in self.kernels if not k.joined]


@define
class Verdict:
    status: VerdictStatus
    summary: str  # one line a user reads first
    device: DeviceInfo | None = None
    compile: CompileResult | None = None
    correctness: Correctness = field(factory=Correctness)
    timing: Timing = field(factory=Timing)
    profile: Profile = field(factory=Profile)
    sanitizer: Sanitizer = field(factory=Sanitizer)
    hack_flags: list[HackFlag] = field(factory=list)
    rubric: list[RubricScore] = field(factory=list)
    usage: Usage = field(factory=Usage)
    memory: MemoryPlan = field(factory=MemoryPlan)
    accuracy: Accuracy = field(factory=Accuracy)
    streams: StreamCheck = field(factory=StreamCheck)
    # What happened to the worker (timeouts, crashes, restarts), oldest first.
    events: list[str] = field(factory=list)
    seconds: float = 0.0
    cache_key: str = ""
    measured_at: str = ""  # UTC time the worker produced it (ISO 8601)
    from_cache: bool = False  # answered from a cache: the figures are from ``measured_at``

    @property
    def offerable(self) -> bool:
        """A verdict the editor may present as a win."""
        return self.status is VerdictStatus.CORRECT and not self.hack_flags
