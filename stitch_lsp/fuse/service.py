"""Fuse a Task: trace → plan → generate → verify, and (on a pass) the files of the edit.

One service for the editor's code action, ``stitch fuse`` and ``stitch bench``.
Nothing here imports torch: tracing runs in a worker process, verification in
the Verifier's worker.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path
from typing import Any

from stitch_lsp.reports.ratios import speed_text
from stitch_lsp.coders import CoderError, attention_probs, conv_layouts, gemm_tune_cases, make_coder
from stitch_lsp.fuse.fallbacks import run_fallbacks
from stitch_lsp.fuse.judge import judge
from stitch_lsp.fuse.outcome import FuseOutcome, keep, task_dir_for
from stitch_lsp.plan.gemm_tiles import GemmOptions, TileCache, mode_override, record
from stitch_lsp.plan.planner import describe, make_plan
from stitch_lsp.verify.rubric import rubric_findings
from stitch_lsp.contract import TRACE_WORKER
from stitch_lsp.contract.gemm_tune import TuneReply, TuneRequest
from stitch_lsp.cancellation import Cancelled, CancelToken, ProgressEvent, Reporter, no_report
from stitch_lsp.contract.trace import TraceReply, TraceRequest
from stitch_lsp.pipeline import Candidate, Plan, Task
from stitch_lsp.serde import from_json, to_json
from stitch_lsp.settings import Settings
from stitch_lsp.verdict import DeviceInfo, Verdict, VerdictStatus
from stitch_lsp.child_env import worker_env


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

    graph = _traced_graph(outcome, settings, verifier, cancel, report)
    if graph is None:
        return outcome
    if device is None and verifier is not None:
        device = _device_of(verifier)
    gemm = gemm_options(settings, root, device)
    if tune_gemm and verifier is not None:
        for line in tune_gemm_tiles(graph, gemm, verifier, cancel=cancel, report=report):
            report(ProgressEvent("tuning", line, 12))
    plan = _plan(outcome, graph, device, gemm, report)

    coded = _code(outcome, plan, coder, settings, gemm, verifier, cancel, report)
    if coded is None:
        return outcome
    candidate, refined = coded
    outcome.candidate = candidate
    outcome.untuned_gemms = untuned_gemms(candidate)
    keep(outdir, candidate)
    outcome.message = _nothing_to_fuse(candidate, verify_library_only)
    if outcome.message:
        return outcome

    if verifier is None:
        outcome.message = f"Generated {candidate.fused_what()} in {outdir}; not verified"
        return outcome
    verdict = _verdict(outcome, plan, refined, verifier, cancel, report)
    if refined is None:  # a Coder with a loop of its own (LLM, auto) chose among its candidates already
        gemm = run_fallbacks(outcome, graph, device, gemm, settings, verifier, cancel, report, verify_library_only)
        candidate, verdict = outcome.candidate, outcome.verdict

    kernel_file = next(iter(sorted(candidate.cuda_sources)), "kernel.cu")
    outcome.findings = rubric_findings(verdict, candidate, module_path=str(outdir / "candidate.py"),
                                       kernel_path=str(outdir / kernel_file))
    outcome.message = _not_offered(outcome, verdict, refined, outdir)
    if outcome.message:
        return outcome
    outcome.message = _with_notes(f"Fused {candidate.fused_what()}: " + (_speedups(verdict) or verdict.summary),
                                  outcome, refined)
    if task.origin_path and edit_namer is not None:
        from stitch_lsp.fuse.edit import edit_files

        outcome.edit_files = edit_files(outcome, settings, *edit_namer(outcome), gemm=gemm)
    report(ProgressEvent("done", outcome.message, 100))
    return outcome


def _traced_graph(outcome: FuseOutcome, settings: Settings, verifier: Any, cancel: CancelToken,
                  report: Reporter) -> Any:
    """The task's traced graph; None when there is nothing to plan (the outcome's message says why)."""
    task = outcome.task
    report(ProgressEvent("planning", "tracing the selection", 5))
    cancel.raise_if_cancelled()
    traced = trace(task, settings, verifier=verifier, cancel=cancel)
    if not traced.ok or traced.graph is None:
        outcome.message = f"Could not trace the selection: {traced.message}"
        if "comment" in (task.shape_source or ""):  # the shapes are the user's: say where to look
            outcome.message += "; check the shapes in the `# stitch:` comment above it (or record your program)"
        return None
    if not traced.graph.nodes:
        # e.g. arithmetic on sizes (x.shape[0] * 2): Python computes it; no tensor op ran.
        outcome.message = ("Nothing to fuse: the selection runs no tensor ops (tracing it found none); "
                           "select the lines that compute on tensors")
        return None
    return traced.graph


def _device_of(verifier: Any) -> DeviceInfo | None:
    """The verifier's GPU (its name keys the measured GEMM tiles); None when it has none."""
    device = getattr(verifier, "device", None)
    device = device if isinstance(device, DeviceInfo) else None
    if device is None and callable(getattr(verifier, "device_info", None)):
        try:  # the GPU's name keys the measured GEMM tiles
            device = verifier.device_info()
        except Exception:  # noqa: BLE001 - no device: the table's tiles
            device = None
        device = device if isinstance(device, DeviceInfo) else None
    return device


def _plan(outcome: FuseOutcome, graph: Any, device: DeviceInfo | None, gemm: GemmOptions, report: Reporter) -> Plan:
    plan = make_plan(outcome.task, graph, device, gemm, layouts=conv_layouts, probs=attention_probs)
    outcome.plan = plan
    outcome.plan_text = describe(plan)
    (Path(outcome.task_dir) / "plan.json").write_text(to_json(plan, indent=1), encoding="utf-8")
    report(ProgressEvent("planning", outcome.plan_text.splitlines()[0], 15))
    return plan


def _code(outcome: FuseOutcome, plan: Plan, coder: str, settings: Settings, gemm: GemmOptions, verifier: Any,
          cancel: CancelToken, report: Reporter) -> tuple[Candidate, Any] | None:
    """The Coder's candidate and, for a Coder that runs its own plan → code → verify → refine loop, that
    loop's result (else None). None when there is no candidate (the outcome's message says why)."""
    cancel.raise_if_cancelled()
    report(ProgressEvent("generating", f"{coder} Coder", 25))
    refined = None  # the LLM / auto Coder's own plan → code → verify → refine loop
    try:
        writer = make_coder(coder, settings)
        if hasattr(writer, "gemm"):
            writer.gemm = gemm  # the template Coder: the same GEMM choices and tiles as the plan
        if verifier is not None and callable(getattr(writer, "run", None)):
            from stitch_lsp.verify.service import VerifyOptions

            refined = writer.run(outcome.task, plan, verifier=verifier,
                                 verify_options=VerifyOptions(compile_mode=settings.compile_mode), cancel=cancel,
                                 report=report)
            candidate = refined.candidate or refined.kept
        else:
            candidate = writer.generate(outcome.task, plan, None)
    except CoderError as exc:
        outcome.message = str(exc)
        return None
    if candidate is None:
        outcome.message = refined.message if refined is not None else "The Coder produced no candidate"
        outcome.verdict = refined.verdict if refined is not None else None
        return None
    return candidate, refined


def _verdict(outcome: FuseOutcome, plan: Plan, refined: Any, verifier: Any, cancel: CancelToken,
             report: Reporter) -> Verdict:
    """The candidate's verdict, kept beside it (``verdict.json``): the Coder's own loop's when it judged it."""
    cancel.raise_if_cancelled()
    if refined is not None and refined.verdict is not None:
        verdict = refined.verdict  # verified, with the rubric, inside the loop
    else:
        verdict = judge(outcome.task, outcome.candidate, plan, verifier, cancel, report)
    outcome.verdict = verdict
    (Path(outcome.task_dir) / "verdict.json").write_text(to_json(verdict, indent=1), encoding="utf-8")
    return verdict


def _nothing_to_fuse(candidate: Candidate, verify_library_only: bool) -> str:
    """Why the candidate is not worth verifying: it fuses nothing (and is not a library call the caller
    verifies anyway). "" when it is."""
    library_only = bool(candidate.library_calls) and not candidate.blocking_ops
    if candidate.fuses_anything or (verify_library_only and library_only):
        return ""
    if library_only:
        return ("Nothing to fuse: " + "; ".join(candidate.library_calls)
                + " and nothing after it (a library call is all there is)")
    if candidate.blocking_ops:
        return "Nothing to fuse: no template covers " + "; ".join(candidate.blocking_ops)
    return ("Nothing to fuse: " + "; ".join(candidate.notes or candidate.uncovered_ops)
            if (candidate.notes or candidate.uncovered_ops) else "Nothing to fuse")


def _not_offered(outcome: FuseOutcome, verdict: Verdict, refined: Any, outdir: Path) -> str:
    """Why the judged candidate is not offered: no GPU to judge it, slower than the library, or not passed.
    "" when it is offered."""
    if verdict.status is VerdictStatus.NO_GPU:
        return no_gpu_message(verdict, outdir)
    if outcome.slower_than_library:
        return (f"Fused kernel not offered: {outcome.gemm_fallback}. "
                f"Generated code kept in {outdir}")
    if not verdict.offerable:
        why = verdict.summary or verdict.status.value
        if verdict.hack_flags:
            why += " (anti-hacking: " + "; ".join(f.message for f in verdict.hack_flags) + ")"
        return _with_notes(f"Fused kernel not offered: {why}. Generated code kept in {outdir}", outcome, refined)
    return ""


def _with_notes(message: str, outcome: FuseOutcome, refined: Any) -> str:
    """``message`` followed by what each fallback did and what the Coder's own loop said."""
    for note in (outcome.attention_fallback, outcome.gemm_fallback, outcome.layout_fallback):
        message += f". {note}" if note else ""
    if refined is not None:
        message += f". {refined.message}"
    return message


def short_hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:10]
