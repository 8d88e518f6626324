"""``coder="llm"`` and ``coder="auto"`` for the fuse pipeline.

``auto`` runs the built-in template Coder first (offline, no key). Where that
candidate falls short — ops it left in PyTorch, plan groups it cannot cover, a
failed or flagged verdict, or a speedup below the target — and an API key is
configured, the LLM Coder's loop runs on the same task and plan, and the best
offerable candidate of the two wins. Both verdicts carry the rule-based rubric.
"""

from __future__ import annotations

from typing import Any

import attrs

from stitch_lsp.coders.errors import CoderUnavailable
from stitch_lsp.coders.llm.coder import LlmCoder, LlmConfig, LlmOutcome, VerifierLike
from stitch_lsp.coders.llm.key import KEYS, NO_KEY_MESSAGE, Secret
from stitch_lsp.verify.rubric import RubricContext, apply_rubric, passes
from stitch_lsp.cancellation import CancelToken, ProgressEvent, Reporter, no_report
from stitch_lsp.pipeline import Candidate, Plan, Task
from stitch_lsp.settings import Settings
from stitch_lsp.verdict import Verdict, VerdictStatus


def make_coder(name: str, settings: Settings, *, api_key: Secret | None = None,
               config: LlmConfig | None = None) -> "LlmCoder | AutoCoder":
    key = api_key if api_key is not None else KEYS.get()
    if name == "llm":
        if key is None:
            raise CoderUnavailable(NO_KEY_MESSAGE)
        return LlmCoder(settings, api_key=key, config=config)
    if name == "auto":
        return AutoCoder(settings, api_key=key, config=config)
    raise ValueError(f"unknown coder {name!r}")


def shortfalls(candidate: Candidate, verdict: Verdict, plan: Plan | None, target_speedup: float) -> list[str]:
    """Why the template's candidate is not the end of the story (empty: it is)."""
    reasons = []
    if not passes(verdict):
        reasons.append(f"its candidate was not offerable ({verdict.status.value}: {verdict.summary})")
    if candidate.uncovered_ops:
        reasons.append("it left " + ", ".join(candidate.uncovered_ops) + " in PyTorch")
    uncovered = [g for g in (plan.groups if plan else []) if not g.covered]
    if uncovered:
        reasons.append("it cannot cover " + "; ".join(f"{' → '.join(g.ops)} ({g.note or g.kind})" for g in uncovered))
    speedup = verdict.timing.speedup_vs_eager
    if passes(verdict) and speedup is not None and speedup < target_speedup:
        reasons.append(f"{speedup:.2f}x is below the {target_speedup:g}x target")
    return reasons


class AutoCoder:
    name = "auto"

    def __init__(self, settings: Settings, *, api_key: Secret | None = None, config: LlmConfig | None = None,
                 template: Any = None):
        if template is None:
            from stitch_lsp.coders.template import TemplateCoder

            template = TemplateCoder()
        self.settings = settings
        self.template = template
        self.llm = LlmCoder(settings, api_key=api_key, config=config) if api_key is not None else None

    def generate(self, task: Task, plan: Plan, feedback: str | None = None) -> Candidate:
        """The seam without a Verifier: the template's candidate (the LLM needs the Verifier's feedback)."""
        return self.template.generate(task, plan, feedback)

    def run(self, task: Task, plan: Plan, *, verifier: VerifierLike, verify_options: Any = None,
            cancel: CancelToken | None = None, report: Reporter | None = None) -> LlmOutcome:
        cancel = cancel or CancelToken()
        report = report or no_report
        report(ProgressEvent("generating", "template Coder"))
        try:
            template = self.template.generate(task, plan)
        except ValueError as err:  # nothing it can lower: the LLM gets the whole task
            template, template_verdict, reasons = None, None, [f"it could not start: {err}"]
        else:
            template_verdict = None
        if template is not None and not template.fuses_anything:
            why = "; ".join(template.notes or template.uncovered_ops) or "nothing it can lower"
            template, reasons = None, [f"it generated no kernel ({why})"]
        elif template is not None:
            cancel.raise_if_cancelled()
            template_verdict = apply_rubric(
                verifier.verify(task.source, template, verify_options, cancel=cancel, report=report),
                template, RubricContext(plan=plan))
            reasons = shortfalls(template, template_verdict, plan, self.settings.target_speedup)
        from_template = _template_outcome(template, template_verdict, reasons)
        if not reasons or (template_verdict is not None and template_verdict.status is VerdictStatus.NO_GPU):
            return from_template  # nothing to improve, or nothing could be checked here: no tokens spent
        if self.llm is None:
            from_template.message = (from_template.message + " " if from_template.message else "") + (
                "Claude was not asked to improve on it: no Anthropic API key is configured.")
            return from_template
        report(ProgressEvent("generating", "asking Claude: the template Coder " + "; ".join(reasons)))
        hinted = attrs.evolve(plan, notes=[*plan.notes, "The built-in Coder fell short: " + "; ".join(reasons)
                                           + ". Write ModelNew covering every op in CUDA."])
        llm = self.llm.run(task, hinted, cancel=cancel, report=report, verifier=verifier,
                           verify_options=verify_options)
        return best_of(from_template, llm)


def _template_outcome(candidate: Candidate | None, verdict: Verdict | None,
                      reasons: list[str] | None = None) -> LlmOutcome:
    if candidate is None or verdict is None:
        why = f"The template Coder fell short: {'; '.join(reasons)}." if reasons else ""
        return LlmOutcome(None, None, why, coder="template", failure="no_candidate")
    if passes(verdict):
        speedup = verdict.timing.speedup_vs_eager
        pace = f"{speedup:.2f}x over eager" if speedup is not None else "speed not measured"
        return LlmOutcome(candidate, verdict, f"The template Coder's candidate is correct ({pace}).", coder="template")
    return LlmOutcome(None, verdict, f"The template Coder's candidate was not offerable: {verdict.summary}.",
                      coder="template", failure=verdict.status.value, kept=candidate)


def best_of(template: LlmOutcome, llm: LlmOutcome) -> LlmOutcome:
    """The faster offerable candidate (the template's on a tie: it needs no key to rebuild)."""
    def speed(outcome: LlmOutcome) -> float:
        return (outcome.verdict.timing.speedup_vs_eager or 0.0) if outcome.verdict is not None else 0.0

    if template.ok and (not llm.ok or speed(template) >= speed(llm)):
        why = f" Claude's best was slower ({speed(llm):.2f}x)." if llm.ok else f" Claude: {llm.message}"
        return _with_spend(attrs.evolve(template, message=template.message + why), llm)
    if llm.ok:
        tail = f" (the template Coder's reached {speed(template):.2f}x)" if template.ok else ""
        return attrs.evolve(llm, message=llm.message + tail)
    if llm.verdict is None:  # Claude produced nothing verifiable: the template's attempt is what there is
        return _with_spend(attrs.evolve(template, message=f"{template.message} {llm.message}".strip()), llm)
    return attrs.evolve(llm, message=f"{template.message} {llm.message}".strip())


def _with_spend(outcome: LlmOutcome, llm: LlmOutcome) -> LlmOutcome:
    """``outcome`` carrying what asking Claude cost, in its verdict too (the job spent it either way)."""
    verdict = attrs.evolve(outcome.verdict, usage=llm.usage) if outcome.verdict is not None else None
    return attrs.evolve(outcome, verdict=verdict, rounds=llm.rounds, usage=llm.usage)
