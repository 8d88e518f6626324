"""The four-dimension rubric: anti-hacking, CUDA engineering, operator coverage, skill compliance.

Each dimension scores 1–5 with reasons. The rule-based scores always run, for
every Coder's candidates (template and LLM alike), from what the Verifier found
(static and dynamic anti-hacking checks, timing, the profile, ptxas figures), the
Plan and, for skill compliance, the previous round's verdict. An optional model
judge (``llm_judge``) adds its own scores next to them; it can only make things
stricter. A candidate with any anti-hacking flag is never offered.
"""

from __future__ import annotations

import ast
import re

import attrs
from attrs import define, field

from stitch_lsp.analysis.cuda_analysis import analyze_cuda
from stitch_lsp.findings import Finding, Range, Severity
from stitch_lsp.pipeline import Candidate, Plan
from stitch_lsp.verdict import HackFlag, RubricScore, Verdict, VerdictStatus
from stitch_lsp.verify.anti_hacking import cuda_flags, dotted_name, settled_by_run
from stitch_lsp.verify.anti_hacking import static_flags as module_flags

ANTI_HACKING = "anti_hacking"
CUDA_ENGINEERING = "cuda_engineering"
OPERATOR_COVERAGE = "operator_coverage"
SKILL_COMPLIANCE = "skill_compliance"
DIMENSIONS = (ANTI_HACKING, CUDA_ENGINEERING, OPERATOR_COVERAGE, SKILL_COMPLIANCE)
LABELS = {ANTI_HACKING: "Anti-hacking", CUDA_ENGINEERING: "CUDA engineering",
          OPERATOR_COVERAGE: "Operator coverage", SKILL_COMPLIANCE: "Skill compliance"}

SOURCE = "stitch rubric"

# What a binding's forward may call on torch without doing the task's computation.
BOOKKEEPING = {
    "empty", "empty_like", "empty_strided", "contiguous", "view", "reshape", "size", "stride", "numel", "dim",
    "is_contiguous", "data_ptr", "device", "dtype", "to", "flatten", "unsqueeze", "squeeze", "permute",
    "transpose", "expand", "as_strided", "current_stream", "get_device", "element_size", "Size",
    "is_floating_point", "cuda", "ndimension", "new_empty", "narrow", "chunk", "split", "unbind",
}


@define
class RubricContext:
    """What the candidate was asked to do: the plan, and the last round's verdict (LLM only)."""

    plan: Plan | None = None
    previous: Verdict | None = None
    previous_candidate: Candidate | None = None


@define
class CoverageReport:
    planned_ops: list[str] = field(factory=list)
    left_in_pytorch: list[tuple[str, int]] = field(factory=list)  # (call, 0-based module line)


def score_rules(verdict: Verdict, candidate: Candidate, context: RubricContext | None = None) -> list[RubricScore]:
    """The rule-based rubric for one verified candidate (any Coder)."""
    context = context or RubricContext()
    flags = all_hack_flags(verdict, candidate)
    return [
        score_anti_hacking(verdict, flags),
        score_cuda_engineering(verdict, context.plan, static_analysis(candidate)),
        score_operator_coverage(candidate, context.plan),
        score_skill_compliance(verdict, candidate, context),
    ]


def apply_rubric(verdict: Verdict, candidate: Candidate, context: RubricContext | None = None) -> Verdict:
    """``verdict`` with the rule-based rubric and any static hack flags the Verifier's verdict lacked.

    A static flag found here turns a "correct" verdict into "hacking": it must never be offered.
    """
    flags = all_hack_flags(verdict, candidate)
    status = verdict.status
    summary = verdict.summary
    if flags and status is VerdictStatus.CORRECT:
        status = VerdictStatus.HACKING
        summary = f"rejected by anti-hacking checks: {flags[0].code} {flags[0].message}"
    rubric = [s for s in verdict.rubric if s.judge != "rules"] + score_rules(verdict, candidate, context)
    return attrs.evolve(verdict, status=status, summary=summary, hack_flags=flags, rubric=rubric)


# -- anti-hacking ---------------------------------------------------------------------------
def all_hack_flags(verdict: Verdict, candidate: Candidate) -> list[HackFlag]:
    """The Verifier's flags plus the static checks on the candidate's module (deduplicated)."""
    flags = list(verdict.hack_flags)
    seen = {(f.code, f.line) for f in flags}
    for flag in settled_by_run(static_flags(candidate), verdict):
        if (flag.code, flag.line) not in seen:
            flags.append(flag)
            seen.add((flag.code, flag.line))
    return flags


def static_flags(candidate: Candidate) -> list[HackFlag]:
    """The Verifier's static anti-hacking checks: the module (ops left to PyTorch by design excepted) and its CUDA."""
    return module_flags(candidate.module_source, list(candidate.uncovered_ops)) + cuda_flags(candidate.cuda_sources)


def score_anti_hacking(verdict: Verdict, flags: list[HackFlag]) -> RubricScore:
    if flags:
        reasons = [f"{f.code}{f' (line {f.line + 1})' if f.line is not None else ''}"
                   f"{' at run time' if f.dynamic else ''}: {f.message}" for f in flags]
        return RubricScore(ANTI_HACKING, 1, reasons + ["never offered, whatever its speed"])
    if not verdict.timing.host_clock_ok:
        return RubricScore(ANTI_HACKING, 2, ["the host clock disagrees with the CUDA events: work may run on a "
                                             "stream or thread the timer does not see"])
    if verdict.status is VerdictStatus.CORRECT:
        if verdict.timing.suspicious:
            return RubricScore(ANTI_HACKING, 4, ["static and dynamic checks clean; the >10x speedup triggered "
                                                 "extra scrutiny, which it passed — worth a human look"])
        return RubricScore(ANTI_HACKING, 5, ["static and dynamic anti-hacking checks clean"])
    return RubricScore(ANTI_HACKING, 4, [f"static checks clean; dynamic checks did not run ({verdict.status.value})"])


# -- CUDA engineering -------------------------------------------------------------------------
def static_analysis(candidate: Candidate) -> list[Finding]:
    """Stitch's own CUDA rules (STC001 ...) on the candidate's kernels: warnings and errors, per file."""
    found: list[Finding] = []
    for name, source in sorted(candidate.cuda_sources.items()):
        if name.endswith(".py"):
            continue  # a Triton kernel (Python): the CUDA rules do not apply
        # One analyzer slot per file name: candidates replace each other there.
        analysis = analyze_cuda(source, f"<stitch candidate>/{name}")
        found += [attrs.evolve(f, path=name) for f in analysis.findings if f.severity <= Severity.WARNING]
    return found


def score_cuda_engineering(verdict: Verdict, plan: Plan | None, static: list[Finding] | None = None) -> RubricScore:
    if verdict.compile is not None and not verdict.compile.ok:
        return RubricScore(CUDA_ENGINEERING, 1, ["does not compile"])
    score, reasons = 5, []
    codes = sorted({f.code for f in static or []})
    if codes:
        score -= min(2, len(codes))
        reasons += [f"{f.code} ({f.path}:{f.range.start.line + 1}): {f.message}" for f in (static or [])[:3]]
    measured = False
    for res in verdict.compile.kernels if verdict.compile else []:
        if res.spill_stores or res.spill_loads:
            score -= 1
            reasons.append(f"{res.name} spills registers ({res.spill_stores} B stored, {res.spill_loads} B loaded)")
    timing = verdict.timing
    if timing.status == "measured" and timing.candidate is not None:
        measured = True
        if timing.speedup_vs_eager is not None and timing.speedup_vs_eager < 1.0:
            score -= 1
            reasons.append(f"slower than eager PyTorch ({timing.speedup_vs_eager:.2f}x)")
        if plan is not None and plan.floor_us:
            fraction = plan.floor_us / max(timing.candidate.median_ms * 1000.0, 1e-9)
            if fraction < 0.1:
                score -= 2
                reasons.append(f"at {fraction:.0%} of the floor time ({plan.floor_us:.1f} µs)")
            elif fraction < 0.3:
                score -= 1
                reasons.append(f"at {fraction:.0%} of the floor time ({plan.floor_us:.1f} µs)")
            else:
                reasons.append(f"at {fraction:.0%} of the floor time ({plan.floor_us:.1f} µs)")
    for kernel in (k for k in verdict.profile.kernels if k.role == "candidate"):
        measured = True
        if kernel.bound == "memory" and kernel.dram_throughput_pct is not None and kernel.dram_throughput_pct < 50:
            score -= 2 if kernel.dram_throughput_pct < 25 else 1
            reasons.append(f"{kernel.name} is memory-bound at {kernel.dram_throughput_pct:.0f}% of DRAM peak")
        if kernel.achieved_occupancy_pct is not None and kernel.achieved_occupancy_pct < 25:
            score -= 1
            limiter = f", limited by {kernel.occupancy_limiter}" if kernel.occupancy_limiter else ""
            reasons.append(f"{kernel.name} achieves {kernel.achieved_occupancy_pct:.0f}% occupancy{limiter}")
        big = [r for r in kernel.rules if (r.estimated_speedup_pct or 0) >= 20]
        if big:
            score -= 1
            top = max(big, key=lambda r: r.estimated_speedup_pct or 0)
            reasons.append(f"Nsight Compute {top.name}: est. {top.estimated_speedup_pct:.0f}% left on the table")
    if not measured:
        score = min(score, 3)
        reasons.append("not timed or profiled here: scored from compile figures only")
    elif not reasons:
        reasons.append("no bottleneck found by timing or profile")
    accuracy = verdict.accuracy
    if accuracy.status == "measured" and accuracy.less_accurate and accuracy.ratio is not None:
        # A warning even inside the tolerance: speed bought with precision (TF32, half accumulators,
        # fast-math) is a trade the user should see.
        score = min(score, 2)
        reasons.append(f"{accuracy.ratio:.1f}x less accurate than eager against a float64 run of the reference "
                       f"(max |error| {accuracy.candidate_max_abs_err:.3g} vs eager's "
                       f"{accuracy.eager_max_abs_err:.3g})")
    return RubricScore(CUDA_ENGINEERING, max(1, min(5, score)), reasons)


# -- operator coverage -------------------------------------------------------------------------
def coverage(candidate: Candidate, plan: Plan | None) -> CoverageReport:
    planned = [op for group in (plan.groups if plan else []) for op in group.ops]
    return CoverageReport(planned_ops=planned, left_in_pytorch=pytorch_compute_calls(candidate.module_source))


def score_operator_coverage(candidate: Candidate, plan: Plan | None) -> RubricScore:
    report = coverage(candidate, plan)
    by_design = list(candidate.uncovered_ops)
    in_pytorch = [f"{call} (line {line + 1})" for call, line in report.left_in_pytorch]
    total = max(len(report.planned_ops), len(by_design) + len(in_pytorch), 1)
    left = len(by_design) + len(in_pytorch)
    ratio = max(0.0, (total - left) / total)
    score = 5 if left == 0 else 4 if ratio >= 0.75 else 3 if ratio >= 0.5 else 2 if ratio >= 0.25 else 1
    reasons = []
    if report.planned_ops:
        reasons.append(f"{total - left} of {total} planned ops run in the candidate's CUDA")
    if by_design:
        reasons.append("left to PyTorch by design: " + ", ".join(by_design))
    if in_pytorch:
        reasons.append("PyTorch compute in forward: " + ", ".join(in_pytorch))
    if not reasons:
        reasons.append("everything in forward runs in the candidate's own kernels")
    return RubricScore(OPERATOR_COVERAGE, score, reasons)


def pytorch_compute_calls(module_source: str) -> list[tuple[str, int]]:
    """Calls in ``ModelNew.forward`` that compute with PyTorch (not allocation or reshaping)."""
    try:
        tree = ast.parse(module_source)
    except SyntaxError:
        return []
    found: list[tuple[str, int]] = []
    for cls in (n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "ModelNew"):
        for fn in (n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "forward"):
            for node in ast.walk(fn):
                if isinstance(node, ast.BinOp) and isinstance(node.op, ast.MatMult):
                    found.append(("@", node.lineno - 1))
                if not isinstance(node, ast.Call):
                    continue
                name = dotted_name(node.func)
                if not name or "()" in name:  # a chain off a call's result is not a PyTorch op by name
                    continue
                head, _, last = name.rpartition(".")
                if head.split(".")[0] in {"torch", "F", "nn"} and last not in BOOKKEEPING:
                    found.append((name, node.lineno - 1))
    return found


# -- skill compliance -------------------------------------------------------------------------
_GLOBAL = re.compile(r"__global__\s+(?:__launch_bounds__\s*\([^)]*\)\s*)?void\s+(\w+)")


def score_skill_compliance(verdict: Verdict, candidate: Candidate, context: RubricContext) -> RubricScore:
    score, reasons = 5, []
    plan = context.plan
    kernels = [m.group(1) for src in candidate.cuda_sources.values() for m in _GLOBAL.finditer(src)]
    if plan is not None and plan.groups:
        planned = len(plan.groups)
        if len(kernels) > planned:
            score -= 1
            reasons.append(f"the plan fuses into {planned} kernel{'s' if planned > 1 else ''}; "
                           f"the candidate defines {len(kernels)} ({', '.join(kernels)})")
        else:
            reasons.append(f"follows the plan's {planned} fusion group{'s' if planned > 1 else ''}")
    previous = context.previous
    if previous is not None:
        repeated = _repeated_problems(previous, verdict)
        if repeated:
            score -= 2 if previous.status in (VerdictStatus.COMPILE_ERROR, VerdictStatus.HACKING) else 1
            reasons.append("did not act on last round's feedback: " + "; ".join(repeated[:3]))
        elif previous.status is not VerdictStatus.CORRECT:
            reasons.append(f"fixed last round's {previous.status.value.replace('_', ' ')}")
    if not reasons:
        reasons.append("no plan or earlier feedback to follow")
    return RubricScore(SKILL_COMPLIANCE, max(1, min(5, score)), reasons)


def _repeated_problems(previous: Verdict, current: Verdict) -> list[str]:
    repeated: list[str] = []
    if previous.compile is not None and current.compile is not None and not current.compile.ok:
        before = {d.message for d in previous.compile.diagnostics if d.severity is Severity.ERROR}
        repeated += [f"same compile error: {d.message}" for d in current.compile.diagnostics
                     if d.severity is Severity.ERROR and d.message in before]
    before_trials = {t.name for t in previous.correctness.failed_trials}
    repeated += [f"trial {t.name} still fails" for t in current.correctness.failed_trials if t.name in before_trials]
    before_flags = {f.code for f in previous.hack_flags}
    repeated += [f"{f.code} again: {f.message}" for f in current.hack_flags if f.code in before_flags]
    return repeated


# -- findings on the generated files ------------------------------------------------------------
def rubric_findings(verdict: Verdict, candidate: Candidate, *, module_path: str, kernel_path: str) -> list[Finding]:
    """Diagnostics for the generated module and kernel: hack flags, weak rubric scores, PyTorch compute."""
    findings: list[Finding] = []
    for flag in verdict.hack_flags:
        line = flag.line if flag.line is not None else 0
        findings.append(Finding(
            path=module_path, range=Range.line_span(line), severity=Severity.ERROR, code=flag.code,
            message=f"Rejected by anti-hacking checks{' at run time' if flag.dynamic else ''}: {flag.message}",
            source=SOURCE, related=(flag.evidence,) if flag.evidence else (),
        ))
    kernel_name = kernel_path.rsplit("/", 1)[-1]
    kernel_source = candidate.cuda_sources.get(kernel_name) or next(iter(candidate.cuda_sources.values()), "")
    first_kernel = _first_kernel_line(kernel_source)
    compute_calls = pytorch_compute_calls(candidate.module_source)
    for score in _effective_scores(verdict.rubric):
        if score.score > 3 or score.dimension == ANTI_HACKING and verdict.hack_flags:
            continue
        if score.dimension == OPERATOR_COVERAGE and compute_calls:
            continue  # said line by line below
        on_module = score.dimension == OPERATOR_COVERAGE
        findings.append(Finding(
            path=module_path if on_module else kernel_path,
            range=Range.line_span(0 if on_module else first_kernel),
            severity=Severity.WARNING if score.score <= 2 else Severity.INFO,
            code=f"rubric-{score.dimension.replace('_', '-')}",
            message=f"{LABELS.get(score.dimension, score.dimension)} {score.score}/5 ({score.judge}): "
                    + "; ".join(score.reasons),
            source=SOURCE,
        ))
    for finding in static_analysis(candidate):
        findings.append(attrs.evolve(finding, path=kernel_path if finding.path == kernel_name else finding.path))
    for call, line in compute_calls:
        findings.append(Finding(
            path=module_path, range=Range.line_span(line), severity=Severity.WARNING,
            code="rubric-operator-coverage",
            message=f"`{call}` computes with PyTorch inside ModelNew.forward: this op is not in the kernel",
            source=SOURCE,
        ))
    return findings


def _effective_scores(scores: list[RubricScore]) -> list[RubricScore]:
    """Per dimension, the lower of the rule-based and the model judge's scores."""
    by_dim: dict[str, RubricScore] = {}
    for s in scores:
        if s.dimension not in by_dim or s.score < by_dim[s.dimension].score:
            by_dim[s.dimension] = s
    return [by_dim[d] for d in DIMENSIONS if d in by_dim]


def _first_kernel_line(source: str) -> int:
    for number, line in enumerate(source.splitlines()):
        if "__global__" in line:
            return number
    return 0


def passes(verdict: Verdict) -> bool:
    """Whether a verdict may be offered: correct, no flag, and no judge calling it a hack."""
    if not verdict.offerable:
        return False
    return not any(s.dimension == ANTI_HACKING and s.score <= 1 for s in verdict.rubric)
