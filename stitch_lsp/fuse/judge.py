"""A candidate judged: the Verifier's verdict with the rubric applied (the first candidate and each
fallback's alike)."""

from __future__ import annotations

from typing import Any

from stitch_lsp.cancellation import CancelToken, ProgressEvent, Reporter
from stitch_lsp.pipeline import Candidate, Plan, Task
from stitch_lsp.verdict import Verdict
from stitch_lsp.verify.rubric import RubricContext, apply_rubric


def judge(task: Task, candidate: Candidate, plan: Plan, verifier: Any, cancel: CancelToken, report: Reporter,
          what: str = "the candidate") -> Verdict:
    report(ProgressEvent("compiling", f"compiling and checking {what}", 40))
    return apply_rubric(_verify(task, candidate, verifier, cancel, report), candidate, RubricContext(plan=plan))


def _verify(task: Task, candidate: Candidate, verifier: Any, cancel, report) -> Verdict:
    from stitch_lsp.verify.service import VerifyOptions  # the Verifier's own module

    settings = getattr(verifier, "settings", None)
    options = VerifyOptions(compile_mode=getattr(settings, "compile_mode", "default"))
    return verifier.verify(task.source, candidate, options, cancel=cancel, report=report)

