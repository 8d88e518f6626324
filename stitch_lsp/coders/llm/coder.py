"""The LLM Coder: plan → code → verify → refine with Claude, behind the Candidate / Verdict seam.

``LlmCoder.run`` is the whole loop for one task:

1. the stable prefix (rules + skills guide, the task) and the Planner's plan go to
   the model; it answers with a candidate (``llm_reply``);
2. the candidate is checked statically, verified, and scored by the rubric;
3. the verdict goes back as feedback (``llm_feedback``); up to ``settings.rounds``
   rounds; after two rounds without progress the job replans (a fresh
   conversation with a new plan and a digest of what failed); it stops early once a
   candidate passes and reaches ``settings.target_speedup``;
4. every call counts against ``settings.token_budget`` (all tokens the API
   processed, cache reads included); the job stops cleanly when it is spent.

With ``settings.candidates_per_round`` above 1, each round asks for that many
replies at once (independent samples of the same conversation) and verifies their
candidates at once, as many together as the verifier has GPUs (its ``slots``: a
``candidate_pool.CandidatePool`` over a multi-GPU or Ray executor); the best of the
round continues the conversation, and the feedback names what the others did. The
rounds and the token budget mean what they meant: a round is one exchange, and
every reply of it counts against the same budget.

The best offerable candidate wins; a candidate with any hack flag never does.
``LlmCoder.generate`` is the one-round seam the fuse pipeline's Coder interface uses.
"""

from __future__ import annotations

import logging
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Protocol

import attrs
from attrs import define, field

from stitch_lsp.coders.errors import CoderError
from stitch_lsp.coders.llm import prompt as llm_prompt
from stitch_lsp.coders.llm.client import LlmError, MessagesClient, RetryPolicy, TurnResult
from stitch_lsp.coders.llm.feedback import reply_problem_feedback, verdict_feedback
from stitch_lsp.coders.llm.judge import JUDGE_MAX_TOKENS, JudgeError, judge
from stitch_lsp.coders.llm.key import KEYS, NO_KEY_MESSAGE, Secret
from stitch_lsp.coders.llm.pricing import add_usage, price_for, total_tokens
from stitch_lsp.coders.llm.reply import ParsedReply, parse_reply
from stitch_lsp.verify.rubric import RubricContext, apply_rubric, passes, static_flags
from stitch_lsp.cancellation import CancelToken, Cancelled, ProgressEvent, Reporter, no_report
from stitch_lsp.pipeline import Candidate, Plan, Task
from stitch_lsp.settings import Settings
from stitch_lsp.verdict import Usage, Verdict, VerdictStatus

log = logging.getLogger(__name__)

MAX_REPLY_TOKENS = 16_000
MIN_REPLY_TOKENS = 1_024  # below this a round cannot produce two complete files
CHARS_PER_TOKEN = 3.5  # conservative estimate of a request's size before sending it
NO_PROGRESS_ROUNDS_BEFORE_REPLAN = 2


class VerifierLike(Protocol):
    def verify(self, reference_source: str, candidate: Candidate, options: Any = None, *,
               cancel: CancelToken | None = None, report: Reporter | None = None) -> Verdict: ...


Replanner = Callable[[Task, Plan | None, list["RoundRecord"]], Plan | None]


@define
class RoundRecord:
    number: int
    candidate: Candidate | None = None
    verdict: Verdict | None = None
    problem: str = ""  # why the reply was not a candidate
    usage: Usage = field(factory=Usage)  # the whole round's, every reply of it
    stop_reason: str | None = None
    replanned_after: bool = False  # the conversation restarted with a new plan after this round
    # With several candidates per round: the round's other replies (this record is the best of them).
    others: list["RoundRecord"] = field(factory=list)

    def describe(self) -> str:
        if self.verdict is not None:
            return f"round {self.number}: {self.verdict.status.value.replace('_', ' ')} — {self.verdict.summary}"
        return f"round {self.number}: unusable reply — {self.problem.split('. ')[0]}"


@define
class LlmOutcome:
    candidate: Candidate | None  # the best offerable candidate, or None
    verdict: Verdict | None  # its verdict (rubric included; usage = the whole job's)
    message: str  # one paragraph for the user
    rounds: list[RoundRecord] = field(factory=list)
    usage: Usage = field(factory=Usage)
    # "" on success; else no_key | bad_key | ... (LlmError.kind) | rounds_exhausted | budget | cancelled |
    # judge_rejected
    failure: str = ""
    target_reached: bool = False
    coder: str = "llm"  # who wrote ``candidate`` (the auto Coder may pick the template's)
    # When nothing is offered: the candidate ``verdict`` belongs to, kept for reading (never offered).
    kept: Candidate | None = None

    @property
    def ok(self) -> bool:
        return self.candidate is not None


@define
class LlmConfig:
    """Settings that are the LLM Coder's alone; the rest come from ``Settings``."""

    base_url: str | None = None  # None: the SDK's default (or ANTHROPIC_BASE_URL)
    retry: RetryPolicy = field(factory=RetryPolicy)
    max_reply_tokens: int = MAX_REPLY_TOKENS
    timeout_s: float = 600.0


class LlmCoderError(CoderError):
    """No candidate came out of a ``generate`` round; ``reason`` says why (for the user and the model)."""

    def __init__(self, reason: str, *, kind: str = "reply"):
        super().__init__(reason)
        self.reason = reason
        self.kind = kind


class LlmCoder:
    name = "llm"

    def __init__(
        self,
        settings: Settings,
        *,
        verifier: VerifierLike | None = None,
        verify_options: Any = None,
        api_key: Secret | None = None,
        config: LlmConfig | None = None,
        replanner: Replanner | None = None,
    ) -> None:
        self.settings = settings
        self.verifier = verifier
        self.verify_options = verify_options
        self.config = config or LlmConfig()
        self.replanner = replanner
        self._key = api_key if api_key is not None else KEYS.get()
        self.usage = Usage()
        self._conversation: _Conversation | None = None

    # -- the Coder seam (one round; the fuse pipeline drives the loop) -----------------------
    def generate(self, task: Task, plan: Plan | None, feedback: Verdict | str | None = None, *,
                 cancel: CancelToken | None = None, report: Reporter | None = None) -> Candidate:
        """One model round. ``feedback``: the previous candidate's verdict (or text), None the first time."""
        conv = self._conversation
        if conv is None or conv.task is not task:
            conv = self._conversation = _Conversation(self, task, plan, cancel or CancelToken(), report or no_report)
        elif feedback is not None:
            text = feedback if isinstance(feedback, str) else verdict_feedback(
                feedback, conv.last_candidate or Candidate(""), round_number=conv.rounds_done,
                rounds=self.settings.rounds, target_speedup=self.settings.target_speedup, plan=plan)
            conv.tell(text)
        try:
            record, parsed = conv.ask(conv.rounds_done + 1)
        except LlmError as err:
            raise LlmCoderError(err.message, kind=err.kind) from None
        self.usage = conv.usage
        if parsed.candidate is None:
            conv.tell(reply_problem_feedback(parsed.problem, record.number, self.settings.rounds))
            raise LlmCoderError(parsed.problem)
        return parsed.candidate

    # -- the whole loop ---------------------------------------------------------------------------
    def run(self, task: Task, plan: Plan | None, *, cancel: CancelToken | None = None,
            report: Reporter | None = None, verifier: VerifierLike | None = None,
            verify_options: Any = None) -> LlmOutcome:
        """The whole loop; ``verifier`` / ``verify_options`` override the ones given at construction."""
        cancel = cancel or CancelToken()
        report = report or no_report
        if verifier is not None:
            self.verifier = verifier
        if verify_options is not None:
            self.verify_options = verify_options
        if self._key is None:
            return LlmOutcome(None, None, NO_KEY_MESSAGE, failure="no_key")
        if self.verifier is None:
            raise ValueError("LlmCoder.run needs a verifier")
        rounds = max(1, self.settings.rounds)
        width = max(1, self.settings.candidates_per_round)
        conv = _Conversation(self, task, plan, cancel, report)
        records: list[RoundRecord] = []
        best: RoundRecord | None = None
        stale = 0  # rounds since the last progress
        failure = "rounds_exhausted"
        try:
            for number in range(1, rounds + 1):
                cancel.raise_if_cancelled()
                record = self._round(task, conv, number, width, records, cancel, report)
                records.append(record)
                if record.verdict is not None and record.verdict.status is VerdictStatus.NO_GPU:
                    best = record
                    failure = "no_gpu"
                    note = (f"No CUDA device: Claude's candidates cannot be checked here, so the job stopped "
                            f"after round {number} instead of spending tokens on unverifiable rounds.")
                    return self._finish(best, records, conv, failure=failure, note=note)
                progressed = _progressed(record, best)
                if record.verdict is not None and (best is None or _rank(record) > _rank(best)):
                    best = record
                stale = 0 if progressed else stale + 1
                if best is not None and best.verdict is not None and passes(best.verdict) and \
                        (best.verdict.timing.speedup_vs_eager or 0.0) >= self.settings.target_speedup:
                    failure = ""
                    break
                if number == rounds:
                    break
                feedback = self._feedback(record, conv, number, rounds)
                if stale >= NO_PROGRESS_ROUNDS_BEFORE_REPLAN:
                    record.replanned_after = True
                    conv.restart(self._replan(task, conv.plan, records), _digest(records), feedback)
                    stale = 0
                    report(ProgressEvent("planning", f"No progress in {NO_PROGRESS_ROUNDS_BEFORE_REPLAN} rounds: "
                                                     "replanning with a fresh conversation"))
                else:
                    conv.tell(feedback)
        except LlmError as err:
            if err.kind == "budget":
                return self._finish(best, records, conv, failure="budget",
                                    note=f"Stopped before round {len(records) + 1}: {err.message}")
            return self._finish(best, records, conv, failure=err.kind,
                                note=f"{err.message}" + (f" (after {len(records)} round"
                                                        f"{'s' if len(records) != 1 else ''})" if records else ""))
        except Cancelled:
            return self._finish(best, records, conv, failure="cancelled", note="Cancelled.")
        return self._finish(best, records, conv, failure=failure, note="")

    # -- pieces -------------------------------------------------------------------------------------
    def _round(self, task: Task, conv: "_Conversation", number: int, width: int, done: list[RoundRecord],
               cancel: CancelToken, report: Reporter) -> RoundRecord:
        """Ask for ``width`` replies, verify their candidates (at once, up to the verifier's slots) and
        keep the best in the conversation; the others ride along in ``RoundRecord.others``."""
        if width == 1:
            record, parsed = conv.ask(number)  # already in the conversation
            tries = [(record, parsed, "")]
        else:
            tries = conv.ask_many(number, width)
        verdicts = self._verify_all(task, [parsed.candidate for _, parsed, _ in tries], conv.plan, done,
                                    cancel, report)
        records = [record for record, _, _ in tries]
        for record, verdict in zip(records, verdicts):
            if verdict is not None:
                record.verdict = attrs.evolve(verdict, usage=attrs.evolve(record.usage, rounds=1))
        if width == 1:
            return records[0]
        best = max(range(len(records)), key=lambda i: (_rank(records[i]), -i))
        chosen = records[best]
        conv.accept(tries[best][1], tries[best][2])
        chosen.others = [r for i, r in enumerate(records) if i != best]
        total = Usage()
        for r in records:
            total = add_usage(total, r.usage)
        chosen.usage = total
        if chosen.verdict is not None:
            chosen.verdict = attrs.evolve(chosen.verdict, usage=attrs.evolve(total, rounds=1))
        return chosen

    def _verify_all(self, task: Task, candidates: list[Candidate | None], plan: Plan | None,
                    done: list[RoundRecord], cancel: CancelToken, report: Reporter) -> list[Verdict | None]:
        """Each candidate's verdict (None where the reply held none), as many at once as the verifier has slots."""
        slots = max(1, int(getattr(self.verifier, "slots", 1) or 1))
        todo = [i for i, c in enumerate(candidates) if c is not None]
        verdicts: list[Verdict | None] = [None] * len(candidates)

        def one(i: int) -> None:
            verdicts[i] = self._verify(task, candidates[i], plan, done, cancel, report)  # type: ignore[arg-type]

        if len(todo) > 1:
            report(ProgressEvent("checking", f"Verifying {len(todo)} candidates, {min(slots, len(todo))} at once"))
        if slots == 1 or len(todo) < 2:
            for i in todo:
                one(i)
        else:
            with ThreadPoolExecutor(max_workers=min(slots, len(todo)), thread_name_prefix="llm-verify") as pool:
                for future in [pool.submit(one, i) for i in todo]:
                    future.result()
        return verdicts

    def _verify(self, task: Task, candidate: Candidate, plan: Plan | None, done: list[RoundRecord],
                cancel: CancelToken, report: Reporter) -> Verdict:
        previous = next((r for r in reversed(done) if r.verdict is not None), None)
        context = RubricContext(plan=plan, previous=previous.verdict if previous else None,
                                previous_candidate=previous.candidate if previous else None)
        # Static anti-hacking first: a flagged candidate costs no worker, no GPU time.
        flags = static_flags(candidate)
        if flags:
            verdict = Verdict(status=VerdictStatus.HACKING, hack_flags=flags,
                              summary=f"rejected before running: {flags[0].code} {flags[0].message}")
            return apply_rubric(verdict, candidate, context)
        assert self.verifier is not None
        verdict = self.verifier.verify(task.source, candidate, self.verify_options, cancel=cancel, report=report)
        return apply_rubric(verdict, candidate, context)

    def _feedback(self, record: RoundRecord, conv: "_Conversation", number: int, rounds: int) -> str:
        if record.verdict is None or record.candidate is None:
            text = reply_problem_feedback(record.problem, number, rounds)
        else:
            text = verdict_feedback(record.verdict, record.candidate, round_number=number, rounds=rounds,
                                    target_speedup=self.settings.target_speedup, plan=conv.plan)
        if record.others:
            lines = [f"- another reply: {other.describe().split(': ', 1)[-1]}" for other in record.others]
            text += (f"\n\n{len(record.others) + 1} replies were tried this round; the feedback above is for "
                     "the best of them (the one in this conversation). The others:\n" + "\n".join(lines))
        return text

    def _replan(self, task: Task, plan: Plan | None, records: list[RoundRecord]) -> Plan | None:
        if self.replanner is not None:
            try:
                new_plan = self.replanner(task, plan, records)
            except Exception:  # a failing planner must not end the job; the model replans itself
                log.exception("replanning failed")
                new_plan = None
            if new_plan is not None:
                return new_plan
        if plan is None:
            return None
        return attrs.evolve(plan, notes=[*plan.notes, "Two attempts on this plan made no progress: "
                                         "choose a different decomposition or algorithm and say why."])

    def _finish(self, best: RoundRecord | None, records: list[RoundRecord], conv: "_Conversation", *,
                failure: str, note: str) -> LlmOutcome:
        offer = best if best is not None and best.verdict is not None and passes(best.verdict) else None
        if offer is not None and self.settings.judge and failure in ("", "rounds_exhausted"):
            judged = self._judge(offer, conv)
            if judged:
                note = judged
            if not passes(offer.verdict):  # type: ignore[arg-type]
                failure, offer = "judge_rejected", None
        usage = attrs.evolve(conv.usage, rounds=len(records))
        self.usage = usage
        spend = _spend(usage, self.settings.model)
        if offer is not None:
            verdict = attrs.evolve(offer.verdict, usage=usage)
            speedup = verdict.timing.speedup_vs_eager
            reached = speedup is not None and speedup >= self.settings.target_speedup
            pace = f"{speedup:.2f}x over eager" if speedup is not None else "speed not measured"
            message = (f"Claude's round-{offer.number} candidate is correct ({pace}"
                       + (f", target {self.settings.target_speedup:g}x reached" if reached else
                          f"; the {self.settings.target_speedup:g}x target was not reached") + f"). {spend}")
            if note:
                message += f" {note}"
            return LlmOutcome(offer.candidate, verdict, message, records, usage,
                              failure="", target_reached=reached)
        lines = [note] if note else []
        if failure == "judge_rejected" and best is not None and best.verdict is not None:
            model_anti = [s for s in best.verdict.rubric if s.judge == "model" and s.dimension == "anti_hacking"]
            lines.insert(0, f"The model judge rejected the round-{best.number} candidate as a hack: "
                            + "; ".join(model_anti[0].reasons if model_anti else []))
        if failure == "rounds_exhausted":
            lines.insert(0, f"No verified candidate after {len(records)} round{'s' if len(records) != 1 else ''}.")
        lines += [r.describe() for r in records]
        lines.append(spend)
        verdict = attrs.evolve(best.verdict, usage=usage) if best is not None and best.verdict else None
        return LlmOutcome(None, verdict, " ".join(line.rstrip(".") + "." for line in lines if line),
                          records, usage, failure=failure or "rounds_exhausted",
                          kept=best.candidate if best is not None else None)


    def _judge(self, offer: RoundRecord, conv: "_Conversation") -> str:
        """Add the model judge's scores to ``offer``'s verdict; returns a note when it could not judge."""
        assert offer.verdict is not None and offer.candidate is not None
        if conv.budget_left() < JUDGE_MAX_TOKENS + conv.estimated_request_tokens() // 2:
            return "The model judge was skipped: the token budget is used up."
        conv.report(ProgressEvent("judging", f"Asking {self.settings.model} to review the candidate"))
        try:
            result = judge(conv.client(), conv.task, conv.plan, offer.candidate, offer.verdict, cancel=conv.cancel)
        except JudgeError as err:
            return f"The model judge gave no usable answer ({err})."
        except LlmError as err:
            return f"The model judge failed: {err.message}"
        except Cancelled:
            return "The model judge was cancelled."
        conv.usage = add_usage(conv.usage, result.usage)
        offer.verdict = attrs.evolve(offer.verdict, rubric=[*offer.verdict.rubric, *result.scores])
        return ""


class _Conversation:
    """One model conversation: messages so far, token accounting, streaming progress."""

    def __init__(self, coder: LlmCoder, task: Task, plan: Plan | None, cancel: CancelToken, report: Reporter):
        self.coder = coder
        self.task = task
        self.plan = plan
        self.cancel = cancel
        self.report = report
        self.usage = Usage()
        self.rounds_done = 0
        self.last_candidate: Candidate | None = None
        self._client: MessagesClient | None = None
        self.system = llm_prompt.system_blocks()
        self.messages = [self._opening(plan, "")]

    @property
    def settings(self) -> Settings:
        return self.coder.settings

    def _opening(self, plan: Plan | None, digest: str) -> dict[str, Any]:
        return llm_prompt.first_turn(self.task, plan, target_speedup=self.settings.target_speedup,
                                     rounds=self.settings.rounds, history_digest=digest)

    def client(self) -> MessagesClient:
        if self._client is None:
            cfg = self.coder.config
            self._client = MessagesClient(self.coder._key, model=self.settings.model, base_url=cfg.base_url,
                                          retry=cfg.retry, timeout_s=cfg.timeout_s)
        return self._client

    def budget_left(self) -> int:
        return self.settings.token_budget - total_tokens(self.usage)

    def estimated_request_tokens(self) -> int:
        chars = sum(len(b["text"]) for b in self.system)
        chars += sum(len(b.get("text", "")) for m in self.messages for b in m["content"])
        return int(chars / CHARS_PER_TOKEN)

    def tell(self, text: str) -> None:
        self.messages.append(llm_prompt.feedback_turn(text))

    def restart(self, plan: Plan | None, digest: str, last_feedback: str) -> None:
        self.plan = plan
        self.messages = [self._opening(plan, f"{digest}\n\nThe last attempt's feedback:\n\n{last_feedback}")]

    def _max_tokens(self, replies: int) -> int:
        """Each of ``replies`` requests' reply limit, so that all of them fit the budget left."""
        per = (self.budget_left() // replies) - self.estimated_request_tokens()
        max_tokens = min(self.coder.config.max_reply_tokens, per)
        if max_tokens < MIN_REPLY_TOKENS:
            raise LlmError("budget", f"The token budget ({self.settings.token_budget:,}) is used up "
                                     f"({total_tokens(self.usage):,} tokens).")
        return max_tokens

    def ask_many(self, number: int, width: int) -> list[tuple[RoundRecord, ParsedReply, str]]:
        """``width`` replies to the same conversation, asked at once (fewer when the budget cannot pay for
        them all). Nothing is added to the conversation: ``accept`` adds the chosen one."""
        while width > 1 and (self.budget_left() // width) - self.estimated_request_tokens() < MIN_REPLY_TOKENS:
            width -= 1
        max_tokens = self._max_tokens(width)
        rounds = self.settings.rounds
        percent = int(100 * (number - 1) / max(rounds, 1))
        self.report(ProgressEvent("generating", f"Round {number}/{rounds}: asking {self.settings.model} for "
                                                f"{width} candidates at once", percent))
        client = self.client()
        messages = llm_prompt.with_rolling_cache(self.messages)

        def one(_: int) -> TurnResult:
            return client.complete(system=self.system, messages=messages, max_tokens=max_tokens, cancel=self.cancel)

        with ThreadPoolExecutor(max_workers=width, thread_name_prefix="llm-ask") as pool:
            futures = [pool.submit(one, i) for i in range(width)]
            outcomes: list[TurnResult | BaseException] = []
            for future in futures:
                try:
                    outcomes.append(future.result())
                except (LlmError, Cancelled) as exc:
                    outcomes.append(exc)
        turns = [t for t in outcomes if isinstance(t, TurnResult)]
        if not turns:  # every request failed: the first failure says why
            raise next(e for e in outcomes if isinstance(e, BaseException))
        self.rounds_done = number
        tries = []
        for turn in turns:
            self.usage = add_usage(self.usage, turn.usage)
            parsed = parse_reply(turn.text, stop_reason=turn.stop_reason, max_tokens=max_tokens)
            tries.append((RoundRecord(number=number, candidate=parsed.candidate, problem=parsed.problem,
                                      usage=turn.usage, stop_reason=turn.stop_reason), parsed, turn.text))
        self.report(ProgressEvent("generating", f"Round {number}/{rounds}: {len(turns)} replies received — "
                                                f"{total_tokens(self.usage):,} tokens so far", percent))
        return tries

    def accept(self, parsed: ParsedReply, text: str) -> None:
        """The chosen reply of a round, as the conversation's assistant turn."""
        self.messages.append(llm_prompt.assistant_turn(text))
        if parsed.candidate is not None:
            self.last_candidate = parsed.candidate

    def ask(self, number: int) -> tuple[RoundRecord, ParsedReply]:
        rounds = self.settings.rounds
        max_tokens = self._max_tokens(1)
        model = self.settings.model
        base = total_tokens(self.usage)
        percent = int(100 * (number - 1) / max(rounds, 1))
        self.report(ProgressEvent("generating", f"Round {number}/{rounds}: asking {model}", percent))
        last = [0.0]

        def on_tokens(out_tokens: int) -> None:
            now = time.monotonic()
            if now - last[0] >= 1.0:  # about once a second: the editor and the CLI both show it
                last[0] = now
                self.report(ProgressEvent("generating", f"Round {number}/{rounds}: {model} writing — "
                                                        f"{base + out_tokens:,} tokens so far", percent))

        def on_status(note: str) -> None:
            self.report(ProgressEvent("generating", f"Round {number}/{rounds}: {note}", percent))

        turn: TurnResult = self.client().complete(
            system=self.system, messages=llm_prompt.with_rolling_cache(self.messages), max_tokens=max_tokens,
            cancel=self.cancel, on_tokens=on_tokens, on_status=on_status)
        self.usage = add_usage(self.usage, turn.usage)
        self.rounds_done = number
        self.messages.append(llm_prompt.assistant_turn(turn.text))
        parsed = parse_reply(turn.text, stop_reason=turn.stop_reason, max_tokens=max_tokens)
        self.report(ProgressEvent("generating", f"Round {number}/{rounds}: reply received — "
                                                f"{total_tokens(self.usage):,} tokens so far", percent))
        if parsed.candidate is not None:
            self.last_candidate = parsed.candidate
        record = RoundRecord(number=number, candidate=parsed.candidate, problem=parsed.problem,
                             usage=turn.usage, stop_reason=turn.stop_reason)
        return record, parsed


# -- ranking candidates ----------------------------------------------------------------------------
_STATUS_RANK = {
    VerdictStatus.CORRECT: 4,
    VerdictStatus.INCORRECT: 3,
    VerdictStatus.UNVERIFIABLE: 3,
    VerdictStatus.CRASHED: 2,
    VerdictStatus.TIMEOUT: 2,
    VerdictStatus.OUT_OF_MEMORY: 2,
    VerdictStatus.TOO_LARGE: 2,
    VerdictStatus.BAD_INPUT: 2,
    VerdictStatus.ERROR: 2,
    VerdictStatus.COMPILE_ERROR: 1,
    VerdictStatus.HACKING: 0,
}


def _rank(record: RoundRecord) -> tuple[float, float, float]:
    """Bigger is better: status, then the share of trials passed, then speed."""
    verdict = record.verdict
    if verdict is None:
        return (-1.0, 0.0, 0.0)
    if verdict.hack_flags:
        return (0.0, 0.0, 0.0)
    trials = verdict.correctness.trials
    share = sum(t.passed for t in trials) / len(trials) if trials else 0.0
    return (float(_STATUS_RANK.get(verdict.status, 0)), share, verdict.timing.speedup_vs_eager or 0.0)


def _progressed(record: RoundRecord, best: RoundRecord | None) -> bool:
    """A better status or share of trials, or at least 5% more speed, than the best so far.

    A first round that does not even compile (or was not a candidate) is no progress.
    """
    if best is None:
        return _rank(record)[0] >= _STATUS_RANK[VerdictStatus.CRASHED]
    new, old = _rank(record), _rank(best)
    if new[:2] != old[:2]:
        return new[:2] > old[:2]
    return new[2] > old[2] * 1.05


def _digest(records: list[RoundRecord]) -> str:
    lines = ["# Earlier attempts (none was accepted)"] + [f"- {r.describe()}" for r in records]
    return "\n".join(lines)


def _spend(usage: Usage, model: str) -> str:
    tokens = total_tokens(usage)
    cached = f", {usage.cache_read_tokens:,} read from cache" if usage.cache_read_tokens else ""
    cost = f"${usage.cost_usd:.4f}" if price_for(model) is not None else "cost unknown for this model"
    return f"{usage.rounds} round{'s' if usage.rounds != 1 else ''}, {tokens:,} tokens{cached}, {cost}."
