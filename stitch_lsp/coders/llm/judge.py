"""The optional model judge (``settings.judge``): a second opinion on the rubric, through the same API.

It reads the reference, the plan, the candidate and what the Verifier measured,
and scores the same four dimensions. Its scores sit next to the rule-based ones
(``judge="model"``); the rubric shows the lower of the two, and a judge that
scores anti-hacking 1 keeps the candidate from being offered. It can only make
the verdict stricter, never rescue a candidate the rules rejected.
"""

from __future__ import annotations

import json
import re

from attrs import define

from stitch_lsp.coders.llm.client import MessagesClient
from stitch_lsp.coders.llm.prompt import plan_text, task_text
from stitch_lsp.verify.rubric import DIMENSIONS
from stitch_lsp.cancellation import CancelToken
from stitch_lsp.pipeline import Candidate, Plan, Task
from stitch_lsp.verdict import RubricScore, Usage, Verdict

JUDGE_MAX_TOKENS = 1_500

JUDGE_SYSTEM = """\
You review CUDA kernels written to replace a PyTorch reference, for Stitch. Be strict and concrete.
Score four dimensions from 1 (bad) to 5 (excellent), each with one to three short reasons that cite code:
- anti_hacking: does the candidate really compute the result in its own kernels, for every input? 1 if it
  calls PyTorch for the computation, caches or fakes results, hides work from the timer, special-cases
  the test shapes or lowers precision. 5 only if it is plainly honest.
- cuda_engineering: coalescing, vectorised access, occupancy, shared memory and reduction technique,
  measured against the floor the plan gives and the profile.
- operator_coverage: share of the reference's operations done in the candidate's own CUDA.
- skill_compliance: follows the plan and the reply format; numerics, NaN/Inf and shape handling match
  the reference.
Answer with one JSON object and nothing else:
{"anti_hacking": {"score": 1-5, "reasons": ["..."]}, "cuda_engineering": {...},
 "operator_coverage": {...}, "skill_compliance": {...}}
"""


class JudgeError(Exception):
    pass


@define
class JudgeResult:
    scores: list[RubricScore]
    usage: Usage


def judge(client: MessagesClient, task: Task, plan: Plan | None, candidate: Candidate, verdict: Verdict, *,
          cancel: CancelToken | None = None, max_tokens: int = JUDGE_MAX_TOKENS) -> JudgeResult:
    """Ask the model for rubric scores; raise ``JudgeError`` when its answer is unusable."""
    rules = "\n".join(f"- {s.dimension}: {s.score}/5 ({'; '.join(s.reasons)})" for s in verdict.rubric
                      if s.judge == "rules")
    files = "\n\n".join(f"{name}:\n```cuda\n{src}```" for name, src in candidate.cuda_sources.items())
    content = "\n\n".join([
        task_text(task), plan_text(plan),
        "# Candidate", f"```python\n{candidate.module_source}```", files,
        f"# Verifier\n{verdict.status.value}: {verdict.summary}",
        f"# Rule-based rubric\n{rules}" if rules else "",
    ])
    turn = client.complete(
        system=[{"type": "text", "text": JUDGE_SYSTEM}],
        messages=[{"role": "user", "content": [{"type": "text", "text": content}]}],
        max_tokens=max_tokens, cancel=cancel,
    )
    return JudgeResult(parse_scores(turn.text), turn.usage)


def parse_scores(text: str) -> list[RubricScore]:
    match = re.search(r"\{.*\}", text, re.S)
    if not match:
        raise JudgeError("the judge's answer had no JSON object")
    try:
        data = json.loads(match.group(0))
    except ValueError as err:
        raise JudgeError(f"the judge's JSON does not parse: {err}") from None
    scores = []
    for dimension in DIMENSIONS:
        entry = data.get(dimension)
        if not isinstance(entry, dict):
            raise JudgeError(f"the judge gave no score for {dimension}")
        score = entry.get("score")
        if not isinstance(score, int) or not 1 <= score <= 5:
            raise JudgeError(f"the judge's {dimension} score is not an integer from 1 to 5: {score!r}")
        reasons = [str(r) for r in entry.get("reasons", []) if str(r).strip()][:3]
        scores.append(RubricScore(dimension, score, reasons or ["(no reason given)"], judge="model"))
    return scores
