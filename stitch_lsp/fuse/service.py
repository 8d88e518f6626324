"""Fuse a Task: trace → plan → generate → verify, and (on a pass) the files of the edit.

One service for the editor's code action, ``stitch fuse`` and ``stitch bench``.
Nothing here imports torch: tracing runs in a worker process, verification in
the Verifier's worker.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from attrs import define, evolve, field

from stitch_lsp.reports.ratios import speed_text
from stitch_lsp.coders import CoderError, conv_layouts, gemm_tune_cases, make_coder
from stitch_lsp.findings import Finding
from stitch_lsp.plan.conv_layout import uses_channels_last
from stitch_lsp.plan.gemm_tiles import GemmOptions, TileCache, mode_override, record
from stitch_lsp.plan.planner import describe, make_plan
from stitch_lsp.verify.rubric import RubricContext, apply_rubric, rubric_findings
from stitch_lsp.contract import TRACE_WORKER
from stitch_lsp.contract.gemm_tune import TuneReply, TuneRequest
from stitch_lsp.cancellation import Cancelled, CancelToken, ProgressEvent, Reporter, no_report
from stitch_lsp.contract.trace import TraceReply, TraceRequest
from stitch_lsp.pipeline import Candidate, Plan, Task
from stitch_lsp.serde import from_json, to_dict, to_json
from stitch_lsp.settings import Settings
from stitch_lsp.verdict import DeviceInfo, Verdict, VerdictStatus
from stitch_lsp.verify.format import why_not_passed
from stitch_lsp.child_env import worker_env


@define
class FuseOutcome:
    task: Task
    plan: Plan | None = None
    candidate: Candidate | None = None
    verdict: Verdict | None = None
    message: str = ""  # one line for the user: what happened, speedups or why not
    # Relative path (under the workspace) -> text: the kernel module and the loader. Empty unless offerable.
    edit_files: dict[str, str] = field(factory=dict)
    # Where the generated files were kept for reading (``.stitch/tasks/<hash>/``).
    task_dir: str = ""
    plan_text: str = ""
    # Rubric findings and hack flags, placed on the generated files under ``task_dir``.
    findings: list[Finding] = field(factory=list)
    # GEMM-family kernels whose tile is the table's, not measured here: a tuning run would measure them.
    untuned_gemms: int = 0
    # Why the GEMM family's candidate was not the one offered (``auto`` mode: it failed the Verifier, and
    # the candidate with the GEMM left to cuBLAS was generated and judged too). Empty: no fallback ran.
    gemm_fallback: str = ""
    # The GEMM family's candidate passed but ran slower than eager, and without it nothing is left to
    # fuse: nothing is offered (a kernel slower than the code it replaces is no win).
    slower_than_library: bool = False
    channels_last: bool | None = None  # False: the candidate has every convolution in NCHW (the layout fallback)
    layout_fallback: str = ""  # set when a convolution's channels-last candidate was tried again in NCHW: what happened
    # The GEMM family's own verdict, when the fallback's candidate is the one above.
    family_verdict: Verdict | None = None
    attention: bool = True  # False: hand-written attention kept as written (the attention fallback)
    attention_fallback: str = ""  # set when attention taken as one fused call failed and was tried as written

    @property
    def offerable(self) -> bool:
        return bool(self.verdict and self.verdict.offerable and self.edit_files)


def task_dir_for(task: Task, root: Path) -> Path:
    return root / ".stitch" / "tasks" / task.key()


def trace(task: Task, settings: Settings, *, verifier: Any = None, cancel: CancelToken | None = None,
          timeout_s: float = 180.0) -> TraceReply:
    """The Task's aten graph, from a worker (the Verifier's pool when there is one)."""
    request = TraceRequest(task_source=task.source, timeout_s=timeout_s)
    pool = getattr(verifier, "pool", None)
    if pool is not None and hasattr(pool, "call"):
        return pool.call("trace", request, TraceReply, timeout_s=timeout_s, cancel=cancel, report=no_report)
    python = settings.python or sys.executable
    env = worker_env(settings.extra_env)  # allowlisted: the repo on PYTHONPATH, no keys or other secrets
    proc = subprocess.Popen([python, "-m", TRACE_WORKER], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            start_new_session=True)
    unregister = cancel.on_cancel(proc.kill) if cancel else (lambda: None)
    try:
        out, err = proc.communicate(task.source, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        return TraceReply(ok=False, message=f"tracing took longer than {timeout_s:.0f} s")
    finally:
        unregister()
    if cancel is not None and cancel.cancelled:
        raise Cancelled(cancel.reason)
    if proc.returncode != 0:
        tail = err.strip().splitlines()[-1] if err.strip() else f"exit status {proc.returncode}"
        return TraceReply(ok=False, message=f"the tracing worker failed: {tail}")
    return from_json(out, TraceReply)


def _verify(task: Task, candidate: Candidate, verifier: Any, cancel, report) -> Verdict:
    from stitch_lsp.verify.service import VerifyOptions  # the Verifier's own module

    settings = getattr(verifier, "settings", None)
    options = VerifyOptions(compile_mode=getattr(settings, "compile_mode", "default"))
    return verifier.verify(task.source, candidate, options, cancel=cancel, report=report)


def no_gpu_message(verdict: Verdict | None, kept_in: Path | None = None) -> str:
    """The no-GPU ending, with what nvcc said when it compiled the candidate here. ``kept_in``: where the
    candidate lies, for a terminal (the editor offers buttons to open it instead)."""
    kept = f" (kept in {kept_in})" if kept_in is not None else ""
    parts = [f"No CUDA device here: the candidate was generated{kept} but cannot be checked or timed"]
    compiled = verdict.compile if verdict is not None else None
    if compiled is not None and compiled.backend == "nvcc":
        if compiled.ok:
            figures = "; ".join(f"{k.name}: {k.registers} registers, spills {k.spill_stores} B"
                                for k in compiled.kernels[:3])
            parts.append("nvcc compiled it" + (f" ({figures})" if figures else ""))
        else:
            first = compiled.diagnostics[0].message if compiled.diagnostics else "see the report"
            parts.append(f"nvcc failed to compile it: {first}")
    return "; ".join(parts)


def _speedups(verdict: Verdict) -> str:
    """GPU-time ratios with their intervals, as every other surface shows them."""
    return speed_text(verdict.timing) or ""


def gemm_options(settings: Settings, root: Path, device: DeviceInfo | None) -> GemmOptions:
    """The template Coder's GEMM options for a workspace: the mode from the settings, the tiles measured on
    this GPU (``.stitch/gemm_tiles.json``)."""
    return GemmOptions(mode=mode_override(settings.gemm), gpu=device.name if device is not None else "",
                       cache=TileCache.in_workspace(root))


def tune_gemm_tiles(graph: Any, gemm: GemmOptions, verifier: Any, *, cancel: CancelToken | None = None,
                    report: Reporter = no_report, timeout_s: float = 600.0) -> list[str]:
    """Time every candidate tile of the graph's GEMM-family kernels on the verifier's GPU (a worker job)
    and cache the fastest; lines saying what was measured (or why nothing was)."""
    pool = getattr(verifier, "pool", None)
    if pool is None or not hasattr(pool, "call"):
        return ["no GPU worker to tune on"]
    cases = gemm_tune_cases(graph, gemm)
    if not cases:
        return ["every GEMM kernel's tile is measured already"]
    report(ProgressEvent("tuning", f"timing {sum(len(c.tiles) for c in cases)} tiles of {len(cases)} GEMM kernel(s)", 1))
    reply = pool.call("gemm_tune", TuneRequest(cases=cases, budget_s=timeout_s * 0.8), TuneReply, timeout_s=timeout_s,
                      cancel=cancel, report=report)
    if not reply.ok:
        return [reply.message]
    if gemm.cache is None:
        return ["no tile cache to record into"]
    return record(reply, gemm.cache, gemm.gpu or reply.gpu)


def untuned_gemms(candidate: Candidate) -> int:
    return sum(1 for note in candidate.notes if note.startswith("stitch_gemm_") and "(measured here)" not in note)


def fuse_task(task: Task, settings: Settings, *, coder: str = "template", verifier: Any = None,
              cancel: CancelToken | None = None, report: Reporter = no_report,
              workdir: Path | None = None, device: DeviceInfo | None = None,
              edit_namer: Any = None, tune_gemm: bool = False, verify_library_only: bool = False) -> FuseOutcome:
    """Plan, generate and verify ``task``.

    ``verifier`` is a ``stitch_lsp.verify.service.Verifier`` (None: plan and generate only,
    nothing is verified and nothing is offered). ``edit_namer(outcome) -> (module_path,
    func_name)`` lets the caller name the kernel module written into the workspace.
    ``tune_gemm``: first time the GEMM family's tiles on the verifier's GPU (cached for later).
    ``verify_library_only``: a candidate that is nothing but library calls (a plain GEMM or
    convolution: covered, nothing to fuse) is verified too (the bench measures it); else it is
    reported as nothing to fuse.
    """
    cancel = cancel or CancelToken()
    root = Path(workdir or getattr(verifier, "workdir", None) or Path.cwd())
    outdir = task_dir_for(task, root)
    outdir.mkdir(parents=True, exist_ok=True)
    (outdir / "reference.py").write_text(task.source, encoding="utf-8")
    outcome = FuseOutcome(task=task, task_dir=str(outdir))

    report(ProgressEvent("planning", "tracing the selection", 5))
    cancel.raise_if_cancelled()
    traced = trace(task, settings, verifier=verifier, cancel=cancel)
    if not traced.ok or traced.graph is None:
        outcome.message = f"Could not trace the selection: {traced.message}"
        if "comment" in (task.shape_source or ""):  # the shapes are the user's: say where to look
            outcome.message += "; check the shapes in the `# stitch:` comment above it (or record your program)"
        return outcome
    if not traced.graph.nodes:
        # e.g. arithmetic on sizes (x.shape[0] * 2): Python computes it; no tensor op ran.
        outcome.message = ("Nothing to fuse: the selection runs no tensor ops (tracing it found none); "
                           "select the lines that compute on tensors")
        return outcome
    if device is None and verifier is not None:
        device = getattr(verifier, "device", None)
        device = device if isinstance(device, DeviceInfo) else None
        if device is None and callable(getattr(verifier, "device_info", None)):
            try:  # the GPU's name keys the measured GEMM tiles
                device = verifier.device_info()
            except Exception:  # noqa: BLE001 - no device: the table's tiles
                device = None
            device = device if isinstance(device, DeviceInfo) else None
    gemm = gemm_options(settings, root, device)
    if tune_gemm and verifier is not None:
        for line in tune_gemm_tiles(traced.graph, gemm, verifier, cancel=cancel, report=report):
            report(ProgressEvent("tuning", line, 12))
    plan = make_plan(task, traced.graph, device, gemm, layouts=conv_layouts)
    outcome.plan = plan
    outcome.plan_text = describe(plan)
    (outdir / "plan.json").write_text(to_json(plan, indent=1), encoding="utf-8")
    report(ProgressEvent("planning", outcome.plan_text.splitlines()[0], 15))

    cancel.raise_if_cancelled()
    report(ProgressEvent("generating", f"{coder} Coder", 25))
    refined = None  # the LLM / auto Coder's own plan → code → verify → refine loop
    try:
        writer = make_coder(coder, settings)
        if hasattr(writer, "gemm"):
            writer.gemm = gemm  # the template Coder: the same GEMM choices and tiles as the plan
        if verifier is not None and callable(getattr(writer, "run", None)):
            from stitch_lsp.verify.service import VerifyOptions

            refined = writer.run(task, plan, verifier=verifier,
                                 verify_options=VerifyOptions(compile_mode=settings.compile_mode), cancel=cancel,
                                 report=report)
            candidate = refined.candidate or refined.kept
        else:
            candidate = writer.generate(task, plan, None)
    except CoderError as exc:
        outcome.message = str(exc)
        return outcome
    if candidate is None:
        outcome.message = refined.message if refined is not None else "The Coder produced no candidate"
        outcome.verdict = refined.verdict if refined is not None else None
        return outcome
    outcome.candidate = candidate
    outcome.untuned_gemms = untuned_gemms(candidate)
    keep(outdir, candidate)
    library_only = bool(candidate.library_calls) and not candidate.blocking_ops
    if not candidate.fuses_anything and not (verify_library_only and library_only):
        if library_only:
            outcome.message = ("Nothing to fuse: " + "; ".join(candidate.library_calls)
                               + " and nothing after it (a library call is all there is)")
        elif candidate.blocking_ops:
            outcome.message = "Nothing to fuse: no template covers " + "; ".join(candidate.blocking_ops)
        else:
            outcome.message = ("Nothing to fuse: " + "; ".join(candidate.notes or candidate.uncovered_ops)
                               if (candidate.notes or candidate.uncovered_ops) else "Nothing to fuse")
        return outcome

    if verifier is None:
        outcome.message = f"Generated {candidate.fused_what()} in {outdir}; not verified"
        return outcome
    cancel.raise_if_cancelled()
    if refined is not None and refined.verdict is not None:
        verdict = refined.verdict  # verified, with the rubric, inside the loop
    else:
        verdict = _judge(task, candidate, plan, verifier, cancel, report)
    outcome.verdict = verdict
    (outdir / "verdict.json").write_text(to_json(verdict, indent=1), encoding="utf-8")
    why_fallback = attention_fallback_reason(candidate, verdict) if refined is None else ""
    if why_fallback:
        _attention_fallback(outcome, traced.graph, device, gemm, settings, verifier, cancel, report, why_fallback)
        candidate, verdict = outcome.candidate, outcome.verdict
    why_fallback = gemm_fallback_reason(candidate, verdict, gemm) if refined is None else ""
    if why_fallback:
        gemm = _gemm_fallback(outcome, traced.graph, device, gemm, settings, verifier, cancel, report, why_fallback,
                              verify_library_only)
        candidate, verdict = outcome.candidate, outcome.verdict
    why_fallback = layout_fallback_reason(candidate, verdict) if refined is None else ""
    if why_fallback:
        _layout_fallback(outcome, traced.graph, device, gemm, settings, verifier, cancel, report, why_fallback)
        candidate, verdict = outcome.candidate, outcome.verdict
    kernel_file = next(iter(sorted(candidate.cuda_sources)), "kernel.cu")
    outcome.findings = rubric_findings(verdict, candidate, module_path=str(outdir / "candidate.py"),
                                       kernel_path=str(outdir / kernel_file))
    if verdict.status is VerdictStatus.NO_GPU:
        outcome.message = no_gpu_message(verdict, outdir)
        return outcome
    if outcome.slower_than_library:
        outcome.message = (f"Fused kernel not offered: {outcome.gemm_fallback}. "
                           f"Generated code kept in {outdir}")
        return outcome
    if not verdict.offerable:
        why = verdict.summary or verdict.status.value
        if verdict.hack_flags:
            why += " (anti-hacking: " + "; ".join(f.message for f in verdict.hack_flags) + ")"
        outcome.message = f"Fused kernel not offered: {why}. Generated code kept in {outdir}"
        for note in (outcome.attention_fallback, outcome.gemm_fallback, outcome.layout_fallback):
            outcome.message += f". {note}" if note else ""
        if refined is not None:
            outcome.message += f". {refined.message}"
        return outcome
    outcome.message = f"Fused {candidate.fused_what()}: " + (_speedups(verdict) or verdict.summary)
    for note in (outcome.attention_fallback, outcome.gemm_fallback, outcome.layout_fallback):
        outcome.message += f". {note}" if note else ""
    if refined is not None:
        outcome.message += f". {refined.message}"
    if task.origin_path and edit_namer is not None:
        from stitch_lsp.fuse.edit import edit_files

        outcome.edit_files = edit_files(outcome, settings, *edit_namer(outcome), gemm=gemm)
    report(ProgressEvent("done", outcome.message, 100))
    return outcome


def _judge(task: Task, candidate: Candidate, plan: Plan, verifier: Any, cancel: CancelToken, report: Reporter,
           what: str = "the candidate") -> Verdict:
    report(ProgressEvent("compiling", f"compiling and checking {what}", 40))
    return apply_rubric(_verify(task, candidate, verifier, cancel, report), candidate, RubricContext(plan=plan))


def keep(folder: Path, candidate: Candidate, verdict: Verdict | None = None) -> None:
    """The candidate's files (and its verdict) under ``folder``, for reading."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "candidate.py").write_text(candidate.module_source, encoding="utf-8")
    for name, text in candidate.cuda_sources.items():
        (folder / name).write_text(text, encoding="utf-8")
    (folder / "candidate.json").write_text(to_json(candidate, indent=1), encoding="utf-8")
    if verdict is not None:
        (folder / "verdict.json").write_text(to_json(verdict, indent=1), encoding="utf-8")


def uses_gemm_family(candidate: Candidate) -> bool:
    return any(name.startswith("stitch_gemm_") for name in candidate.cuda_sources)


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


def gemm_fallback_reason(candidate: Candidate, verdict: Verdict, gemm: GemmOptions) -> str:
    """Why ``auto``'s choice of the GEMM family is tried again with the GEMMs on cuBLAS: its candidate
    did not pass, or passed slower than eager (whose GEMM is cuBLAS's). "" when it is not (an explicit
    ``triton`` keeps the family, pass or fail)."""
    if not (gemm.mode == "auto" and candidate.coder == "template" and uses_gemm_family(candidate)):
        return ""
    return _refused_or_slow(verdict, "its kernel", ", slower than cuBLAS")


def layout_fallback_reason(candidate: Candidate, verdict: Verdict) -> str:
    """Why a candidate with a convolution in channels-last is tried again in NCHW: the Verifier did not
    pass it (cuDNN's channels-last algorithm rounds otherwise than eager's, which TF32 makes visible),
    or it ran slower than eager. "" when it is not."""
    if candidate.coder != "template" or not uses_channels_last(candidate.notes):
        return ""
    return _refused_or_slow(verdict, "it")


def _layout_fallback(outcome: FuseOutcome, graph: Any, device: DeviceInfo | None, gemm: GemmOptions,
                     settings: Settings, verifier: Any, cancel: CancelToken, report: Reporter, why: str) -> None:
    """Generate the candidate again with every convolution in NCHW and judge it; the outcome takes the
    one that passes, the faster when both do."""
    task, outdir = outcome.task, Path(outcome.task_dir)
    first, first_verdict = outcome.candidate, outcome.verdict
    report(ProgressEvent("generating", f"the convolution in channels-last: {why}; trying it in NCHW", 65))
    cancel.raise_if_cancelled()
    plan = make_plan(task, graph, device, gemm, channels_last=False, layouts=conv_layouts,
                     attention=outcome.attention)
    writer = make_coder("template", settings)
    writer.gemm, writer.channels_last = gemm, False  # type: ignore[attr-defined]
    writer.attention = outcome.attention  # type: ignore[attr-defined]
    candidate = writer.generate(task, plan, None)
    verdict = _judge(task, candidate, plan, verifier, cancel, report, "the candidate with the convolution in NCHW")
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
    verdict = _judge(task, candidate, plan, verifier, cancel, report, "the candidate with the attention as written")
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
    plan = make_plan(task, graph, device, cublas, layouts=conv_layouts, attention=outcome.attention)
    writer = make_coder("template", settings)
    writer.gemm, writer.attention = cublas, outcome.attention  # type: ignore[attr-defined]
    candidate = writer.generate(task, plan, None)
    library_only = bool(candidate.library_calls) and not candidate.blocking_ops
    if not candidate.fuses_anything and not (slow and verify_library_only and library_only):
        outcome.gemm_fallback = f"The GEMM family: {why}; with the GEMM left to cuBLAS nothing else is left to fuse"
        if slow:
            outcome.slower_than_library = True
        return gemm
    verdict = _judge(task, candidate, plan, verifier, cancel, report, "the candidate with the GEMM on cuBLAS")
    if not verdict.offerable or (slow and not _faster(verdict, family_verdict)):
        keep(outdir / "gemm_cublas", candidate, verdict)
        nor = (f"nor did the candidate with the GEMM left to cuBLAS ({why_not_passed(verdict)}" if not verdict.offerable
               else "the candidate with the GEMM left to cuBLAS was no faster (" + (_speedups(verdict) or "not timed"))
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


def outcome_json(outcome: FuseOutcome) -> str:
    data = to_dict(outcome)
    if data.get("plan"):
        data["plan"].pop("graph", None)  # large; it is in plan.json under the task directory
    return json.dumps(data, indent=1, sort_keys=True)


def short_hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:10]


def _adopt(outcome: "FuseOutcome", outdir: Path, plan: Plan, first: tuple[Candidate, Verdict],
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
