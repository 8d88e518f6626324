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
class Trial:
    """One correctness check: a seed, an adversarial case, an ordering, a shape."""

    name: str  # "seed-1", "adversarial-nan", "odd-shape", "candidate-before-reference", ...
    passed: bool
    kind: str = "random"  # random | adversarial | shape | order | mutation | poison | determinism
    max_abs_err: float | None = None
    max_rel_err: float | None = None
    mismatches: int = 0
    detail: str = ""


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
class Timing:
    status: str = "skipped"  # measured | skipped | error
    eager: TimingStats | None = None
    compiled: TimingStats | None = None  # torch.compile, default mode
    candidate: TimingStats | None = None
    speedup_vs_eager: float | None = None
    speedup_vs_compile: float | None = None
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
    # What happened to the worker (timeouts, crashes, restarts), oldest first.
    events: list[str] = field(factory=list)
    seconds: float = 0.0
    cache_key: str = ""

    @property
    def offerable(self) -> bool:
        """A verdict the editor may present as a win."""
        return self.status is VerdictStatus.CORRECT and not self.hack_flags
