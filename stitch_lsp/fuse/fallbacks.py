"""When the first candidate fails the Verifier or runs slower than eager, it is generated again another way
and judged: hand-written attention as written instead of one fused call, the GEMMs on cuBLAS instead of the
GEMM family, convolutions in NCHW instead of channels-last. The outcome takes the fallback's candidate only
when it passes (and, where the first passed too, runs faster); the other is kept aside in the task folder."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from attrs import evolve

from stitch_lsp.cancellation import CancelToken, ProgressEvent, Reporter
from stitch_lsp.coders import ATTENTION_LIBRARY as LIBRARY, attention_probs, conv_layouts, make_coder
from stitch_lsp.fuse.judge import judge
from stitch_lsp.fuse.outcome import FuseOutcome, keep
from stitch_lsp.pipeline import Candidate, Plan
from stitch_lsp.plan.conv_layout import uses_channels_last
from stitch_lsp.plan.gemm_tiles import GemmOptions
from stitch_lsp.plan.planner import describe, make_plan
from stitch_lsp.reports.ratios import speed_text
from stitch_lsp.serde import to_json
from stitch_lsp.settings import Settings
from stitch_lsp.verdict import DeviceInfo, Verdict, VerdictStatus
from stitch_lsp.verify.format import why_not_passed


def run_fallbacks(outcome: FuseOutcome, graph: Any, device: DeviceInfo | None, gemm: GemmOptions,
                  settings: Settings, verifier: Any, cancel: CancelToken, report: Reporter,
                  verify_library_only: bool = False) -> GemmOptions:
    """Each fallback the outcome's judged candidate calls for, in turn (the attention kernel, attention as
    one fused call, then the GEMM family, then the convolution's layout), each on the candidate the one
    before left. Returns the GEMM options of the candidate the outcome now holds."""
    why = attention_kernel_reason(outcome.candidate, outcome.verdict)
    if why:
        _attention_kernel_fallback(outcome, graph, device, gemm, settings, verifier, cancel, report, why)
    why = attention_fallback_reason(outcome.candidate, outcome.verdict)
    if why:
        _attention_fallback(outcome, graph, device, gemm, settings, verifier, cancel, report, why)
    why = gemm_fallback_reason(outcome.candidate, outcome.verdict, gemm)
    if why:
        gemm = _gemm_fallback(outcome, graph, device, gemm, settings, verifier, cancel, report, why,
                              verify_library_only)
    why = layout_fallback_reason(outcome.candidate, outcome.verdict)
    if why:
        _layout_fallback(outcome, graph, device, gemm, settings, verifier, cancel, report, why)
    return gemm


def uses_gemm_family(candidate: Candidate) -> bool:
    return any(name.startswith("stitch_gemm_") for name in candidate.cuda_sources)


def uses_attention_kernel(candidate: Candidate) -> bool:
    return any(name.startswith("stitch_attention_") for name in candidate.cuda_sources)


# Verdicts about the task or the run, not the kernel: a candidate without the GEMM family would end the same.
_NOT_THE_KERNEL = (VerdictStatus.NO_GPU, VerdictStatus.CANCELLED, VerdictStatus.TOO_LARGE, VerdictStatus.UNVERIFIABLE)


def _refused_or_slow(verdict: Verdict, what: str, slower: str = "") -> str:
    """Why a candidate is worth trying again another way: the Verifier did not pass it, or it ran slower
    than eager. "" when neither (or when the verdict is about the task, not the kernel)."""
    if verdict.status in _NOT_THE_KERNEL:
        return ""
    if not verdict.offerable:
        return f"{what} did not pass the Verifier ({why_not_passed(verdict)})"
    speedup = verdict.timing.speedup_vs_eager if verdict.timing else None
    if speedup is not None and speedup < 1.0:
        return f"{what} passed but ran at {speedup:.2f}x eager{slower}"
    return ""


def _slower_than_compile(verdict: Verdict, what: str = "its kernel",
                         tail: str = ", which keeps the GEMM on cuBLAS") -> str:
    """Why a passing candidate is worth timing with its GEMMs (or its attention) on the library although it
    beat eager: ``torch.compile`` (which leaves fp32 GEMMs to cuBLAS and fuses around them) ran faster, its
    whole 95% interval says so. "" otherwise."""
    timing = verdict.timing
    if not verdict.offerable or timing is None or timing.speedup_vs_compile is None:
        return ""
    ci = timing.speedup_vs_compile_ci
    if ci and len(ci) == 2 and ci[1] is not None and ci[1] < 1.0:
        return f"{what} passed but ran at {timing.speedup_vs_compile:.2f}x torch.compile{tail}"
    return ""


def gemm_fallback_reason(candidate: Candidate, verdict: Verdict, gemm: GemmOptions) -> str:
    """Why ``auto``'s choice of the GEMM family is tried again with the GEMMs on cuBLAS: its candidate
    did not pass, or passed slower than eager (whose GEMM is cuBLAS's). "" when it is not (an explicit
    ``triton`` keeps the family, pass or fail)."""
    if not (gemm.mode == "auto" and candidate.coder == "template" and uses_gemm_family(candidate)):
        return ""
    return _refused_or_slow(verdict, "its kernel", ", slower than cuBLAS") or _slower_than_compile(verdict)


def layout_fallback_reason(candidate: Candidate, verdict: Verdict) -> str:
    """Why a candidate with a convolution in channels-last is tried again in NCHW: the Verifier did not
    pass it (cuDNN's channels-last algorithm rounds otherwise than eager's, which TF32 makes visible),
    it ran slower than eager, or ``torch.compile`` beat it across its whole 95% interval (a net kept in
    channels-last from end to end is not always the faster: the two are timed and the faster offered).
    "" when it is not."""
    if candidate.coder != "template" or not uses_channels_last(candidate.notes):
        return ""
    return _refused_or_slow(verdict, "it") or _slower_than_compile(verdict, "it", "")


def _layout_fallback(outcome: FuseOutcome, graph: Any, device: DeviceInfo | None, gemm: GemmOptions,
                     settings: Settings, verifier: Any, cancel: CancelToken, report: Reporter, why: str) -> None:
    """Generate the candidate again with every convolution in NCHW and judge it; the outcome takes the
    one that passes, the faster when both do."""
    task, outdir = outcome.task, Path(outcome.task_dir)
    first, first_verdict = outcome.candidate, outcome.verdict
    report(ProgressEvent("generating", f"the convolution in channels-last: {why}; trying it in NCHW", 65))
    cancel.raise_if_cancelled()
    plan = make_plan(task, graph, device, gemm, channels_last=False, layouts=conv_layouts, probs=attention_probs,
                     attention=outcome.attention)
    writer = make_coder("template", settings)
    writer.gemm, writer.channels_last = gemm, False  # type: ignore[attr-defined]
    writer.attention = outcome.attention  # type: ignore[attr-defined]
    candidate = writer.generate(task, plan, None)
    verdict = judge(task, candidate, plan, verifier, cancel, report, "the candidate with the convolution in NCHW")
    if not verdict.offerable or (first_verdict.offerable and not _faster(verdict, first_verdict)):
        keep(outdir / "conv_nchw", candidate, verdict)
        outcome.layout_fallback = (f"the convolution in channels-last: {why}; in NCHW: "
                                   + (why_not_passed(verdict) if not verdict.offerable else "no faster"))
        return
    _adopt(outcome, outdir, plan, (first, first_verdict), (candidate, verdict), "conv_channels_last",
           f"convolution in NCHW: in channels-last {why}")
    outcome.channels_last = False
    outcome.layout_fallback = f"convolution in NCHW; in channels-last {why} (kept in {outdir / 'conv_channels_last'})"


# Why attention as one fused call can fail where the written code's NaN or Inf reaches the output.
MASKED_NAN = ("PyTorch's fused attention skips masked positions, so NaN or Inf in v beyond the causal mask does "
              "not reach the output as it does in the written code; the written attention is kept")


def attention_fallback_reason(candidate: Candidate, verdict: Verdict) -> str:
    """Why a candidate that took hand-written attention as one ``scaled_dot_product_attention`` call is
    generated again with the attention as written: the Verifier did not pass it (the written code is the
    specification; its NaN and Inf placement included). "" when it is not (it passed, or the verdict is
    about the task, not the kernel)."""
    if candidate.coder != "template" or not candidate.pattern_calls or verdict.status in _NOT_THE_KERNEL:
        return ""
    if verdict.offerable:
        return ""
    failed = [t.name for t in (verdict.correctness.failed_trials if verdict.correctness else [])]
    if any(name in ("adversarial-nan", "adversarial-inf") for name in failed):
        return MASKED_NAN
    return f"attention as one fused call did not pass the Verifier ({why_not_passed(verdict)}); the written attention is kept"


def attention_kernel_reason(candidate: Candidate, verdict: Verdict) -> str:
    """Why a candidate with the attention kernel of our own is generated again with PyTorch's fused attention
    in its place: it did not pass (other than by NaN or Inf beyond a causal mask, where PyTorch's kernel
    behaves as ours and only the attention as written helps), it ran slower than eager, or behind
    ``torch.compile``. "" when none of these."""
    if candidate.coder != "template" or not uses_attention_kernel(candidate) or verdict.status in _NOT_THE_KERNEL:
        return ""
    if not verdict.offerable and attention_fallback_reason(candidate, verdict) == MASKED_NAN:
        return ""
    what = "the attention kernel of our own" if _fused_call_stands_in(candidate) else \
        "the attention probabilities' kernel of our own"
    return _refused_or_slow(verdict, what) or _slower_than_compile(verdict, what, "")


def _fused_call_stands_in(candidate: Candidate) -> bool:
    """Whether the candidate's attention kernels stand for fused attention calls; else they are the probabilities'
    kernels alone (``stitch_attention_probs_``), whose stand-in is the scores GEMM on cuBLAS and a softmax kernel."""
    return any(name.startswith("stitch_attention_") and not name.startswith("stitch_attention_probs_")
               for name in candidate.cuda_sources)


def _attention_kernel_fallback(outcome: FuseOutcome, graph: Any, device: DeviceInfo | None, gemm: GemmOptions,
                               settings: Settings, verifier: Any, cancel: CancelToken, report: Reporter,
                               why: str) -> None:
    """Generate the candidate again with PyTorch's fused attention (or, for the probabilities' kernel, the scores
    GEMM on cuBLAS and a softmax kernel) in place of the kernel of our own and judge it; the outcome takes the one
    that passes, the faster when both do."""
    task, outdir = outcome.task, Path(outcome.task_dir)
    first, first_verdict = outcome.candidate, outcome.verdict
    alt = ("PyTorch's fused attention" if _fused_call_stands_in(first)
           else "the scores GEMM on cuBLAS and a softmax kernel")
    report(ProgressEvent("generating", f"{why}; trying {alt}", 52))
    cancel.raise_if_cancelled()
    mode = LIBRARY if outcome.attention is True else outcome.attention
    plan = make_plan(task, graph, device, gemm, layouts=conv_layouts, attention=mode, probs=attention_probs)
    writer = make_coder("template", settings)
    writer.gemm, writer.attention = gemm, mode  # type: ignore[attr-defined]
    candidate = writer.generate(task, plan, None)
    if not candidate.fuses_anything and first_verdict.offerable:
        outcome.attention_fallback = f"{why[:1].upper()}{why[1:]}; with {alt} nothing is left to fuse"
        return
    verdict = judge(task, candidate, plan, verifier, cancel, report, f"the candidate with {alt}")
    if not verdict.offerable or (first_verdict.offerable and not _faster(verdict, first_verdict)):
        keep(outdir / "attention_library", candidate, verdict)
        nor = (f"with {alt} the candidate did not pass either ({why_not_passed(verdict)}"
               if not verdict.offerable else
               f"with {alt} it was no faster (" + (speed_text(verdict.timing) or "not timed"))
        outcome.attention_fallback = f"{why[:1].upper()}{why[1:]}; {nor}; kept in {outdir / 'attention_library'})"
        return
    _adopt(outcome, outdir, plan, (first, first_verdict), (candidate, verdict), "attention_kernel",
           f"attention runs as {alt}: {why}")
    outcome.attention = mode
    outcome.attention_fallback = f"{alt[:1].upper()}{alt[1:]}: {why} (kept in {outdir / 'attention_kernel'})"


def _attention_fallback(outcome: FuseOutcome, graph: Any, device: DeviceInfo | None, gemm: GemmOptions,
                        settings: Settings, verifier: Any, cancel: CancelToken, report: Reporter, why: str) -> None:
    """Generate the candidate again with the attention as written (its GEMMs, mask and softmax) and judge
    it; the outcome takes it when it passes. The choice is measured, as the GEMM family's cuBLAS fallback is."""
    task, outdir = outcome.task, Path(outcome.task_dir)
    first, first_verdict = outcome.candidate, outcome.verdict
    report(ProgressEvent("generating", f"attention as one fused call failed: {why}", 55))
    cancel.raise_if_cancelled()
    plan = make_plan(task, graph, device, gemm, layouts=conv_layouts, attention=False)
    writer = make_coder("template", settings)
    writer.gemm, writer.attention = gemm, False  # type: ignore[attr-defined]
    candidate = writer.generate(task, plan, None)
    if not candidate.fuses_anything:
        outcome.attention_fallback = f"{why}: with the attention as written nothing is left to fuse"
        return
    verdict = judge(task, candidate, plan, verifier, cancel, report, "the candidate with the attention as written")
    if not verdict.offerable:
        keep(outdir / "attention_as_written", candidate, verdict)
        outcome.attention_fallback = (f"{why}; the candidate with the attention as written did not pass either "
                                      f"({why_not_passed(verdict)}; kept in {outdir / 'attention_as_written'})")
        return
    _adopt(outcome, outdir, plan, (first, first_verdict), (candidate, verdict), "attention_fused_call",
           f"attention not taken as one fused call: {why}")
    outcome.attention = False
    outcome.attention_fallback = (f"Attention as written: {why} (the fused call's candidate is kept in "
                                  f"{outdir / 'attention_fused_call'})")


def _faster(a: Verdict, b: Verdict) -> bool:
    sa = a.timing.speedup_vs_eager if a.timing else None
    sb = b.timing.speedup_vs_eager if b.timing else None
    return sa is not None and (sb is None or sa > sb)


def _gemm_fallback(outcome: FuseOutcome, graph: Any, device: DeviceInfo | None, gemm: GemmOptions,
                   settings: Settings, verifier: Any, cancel: CancelToken, report: Reporter, why: str,
                   verify_library_only: bool = False) -> GemmOptions:
    """Generate the candidate again with the GEMMs left to cuBLAS (the library call and the fused tail)
    and judge it; the outcome takes the one that passes, the faster when both do. Returns the GEMM
    options of the candidate the outcome now holds. ``why``: ``gemm_fallback_reason``'s."""
    task, outdir = outcome.task, Path(outcome.task_dir)
    family, family_verdict = outcome.candidate, outcome.verdict
    slow = family_verdict.offerable  # it passed: the fallback is about speed
    report(ProgressEvent("generating", f"the GEMM family: {why}; trying the GEMM on cuBLAS", 60))
    cancel.raise_if_cancelled()
    cublas = evolve(gemm, mode="cublas")
    plan = make_plan(task, graph, device, cublas, layouts=conv_layouts, attention=outcome.attention,
                     probs=attention_probs)
    writer = make_coder("template", settings)
    writer.gemm, writer.attention = cublas, outcome.attention  # type: ignore[attr-defined]
    candidate = writer.generate(task, plan, None)
    library_only = bool(candidate.library_calls) and not candidate.blocking_ops
    if not candidate.fuses_anything and not (slow and verify_library_only and library_only):
        outcome.gemm_fallback = f"The GEMM family: {why}; with the GEMM left to cuBLAS nothing else is left to fuse"
        timing = family_verdict.timing
        if slow and timing is not None and (timing.speedup_vs_eager or 0.0) < 1.0:
            outcome.slower_than_library = True  # cuBLAS alone (eager) beat it; slower than compile only, it stays
        return gemm
    verdict = judge(task, candidate, plan, verifier, cancel, report, "the candidate with the GEMM on cuBLAS")
    if not verdict.offerable or (slow and not _faster(verdict, family_verdict)):
        keep(outdir / "gemm_cublas", candidate, verdict)
        nor = (f"nor did the candidate with the GEMM left to cuBLAS ({why_not_passed(verdict)}" if not verdict.offerable
               else "the candidate with the GEMM left to cuBLAS was no faster (" + (speed_text(verdict.timing) or "not timed"))
        outcome.gemm_fallback = f"The GEMM family: {why}; {nor}; kept in {outdir / 'gemm_cublas'})"
        return gemm
    # The fallback is offered: it is the outcome's candidate, and its plan says why the family is not used.
    keep(outdir / "gemm_family", family, family_verdict)
    for name in family.cuda_sources:
        (outdir / name).unlink(missing_ok=True)
    keep(outdir, candidate, verdict)
    tail = "with the epilogue fused after it" if candidate.fuses_anything else "alone (nothing else to fuse)"
    plan.notes.append(f"GEMM family not used: {why}; the GEMM runs on cuBLAS {tail}")
    outcome.plan, outcome.plan_text = plan, describe(plan)
    (outdir / "plan.json").write_text(to_json(plan, indent=1), encoding="utf-8")
    outcome.candidate, outcome.verdict, outcome.family_verdict = candidate, verdict, family_verdict
    outcome.untuned_gemms = 0
    outcome.gemm_fallback = f"GEMM on cuBLAS {tail}; the GEMM family: {why} (kept in {outdir / 'gemm_family'})"
    return cublas


def _adopt(outcome: FuseOutcome, outdir: Path, plan: Plan, first: tuple[Candidate, Verdict],
           chosen: tuple[Candidate, Verdict], aside: str, note: str) -> None:
    """A fallback's candidate becomes the outcome; the first candidate is kept aside in ``outdir / aside``
    (its kernels leave the task folder, so the folder holds what is offered)."""
    keep(outdir / aside, *first)
    for name in first[0].cuda_sources:
        (outdir / name).unlink(missing_ok=True)
    keep(outdir, *chosen)
    plan.notes.append(note)
    outcome.plan, outcome.plan_text = plan, describe(plan)
    (outdir / "plan.json").write_text(to_json(plan, indent=1), encoding="utf-8")
    outcome.candidate, outcome.verdict = chosen
