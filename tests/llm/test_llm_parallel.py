"""Several candidates per round: asked for at once, verified at once on a verifier of several GPUs,
the best continuing the conversation; the rounds and the token budget keep their meaning."""

from __future__ import annotations

import time

from stitch_lsp.coders.llm.coder import LlmCoder
from stitch_lsp.coders.llm.pricing import total_tokens
from stitch_lsp.verdict import VerdictStatus

from .candidates import GOOD_CUDA, reply
from .conftest import config_for
from .fake_messages_api import Reply
from .verifiers import ParallelVerifier, compile_error, correct, incorrect


def variant(tag: str) -> str:
    """A reply whose kernel says which variant it is (the verifier's judge reads it back)."""
    return reply(cuda=GOOD_CUDA.replace("// relu(x) * scale, one grid-stride pass.", f"// variant {tag}"))


OUTCOMES = {
    "broken": compile_error(3, 'expected a ";"'),
    "wrong": incorrect({"seed-1": 3.2}),
    "slowish": correct(1.5),
    "fast": correct(2.6),
    "faster": correct(1.9),
}


def judge(candidate):
    tag = candidate.cuda_sources["kernel.cu"].split("// variant ", 1)[1].split()[0]
    return OUTCOMES[tag]


def test_each_round_verifies_its_candidates_at_once_and_keeps_the_best(fake_api, settings, key, task, plan):
    settings = settings.replace(candidates_per_round=3, rounds=3)
    api = fake_api(*[Reply(variant(t)) for t in ("broken", "wrong", "slowish", "faster", "fast", "broken")])
    verifier = ParallelVerifier(slots=3, judge=judge, delay_s=0.3)
    coder = LlmCoder(settings, verifier=verifier, api_key=key, config=config_for(api))
    start = time.monotonic()
    outcome = coder.run(task, plan)
    elapsed = time.monotonic() - start

    assert outcome.ok and outcome.target_reached
    assert "variant fast" in outcome.candidate.cuda_sources["kernel.cu"]
    assert len(outcome.rounds) == 2 and len(api.requests) == 6  # two rounds of three; 2.6x ended it early
    assert verifier.most_at_once == 3 and len(verifier.seen) == 6
    assert elapsed < 6 * 0.3  # three at a time, not one after another

    first = outcome.rounds[0]
    assert first.verdict.status is VerdictStatus.CORRECT and "variant slowish" in first.candidate.cuda_sources["kernel.cu"]
    assert sorted(o.verdict.status.value for o in first.others) == ["compile_error", "incorrect"]
    # Round 2 continues the conversation from the best reply of round 1, told what the other two did.
    for request in api.requests[3:]:
        assert "variant slowish" in request.message_texts("assistant")[0]
        feedback = request.message_texts("user")[-1]
        assert "3 replies were tried this round" in feedback and "compile error" in feedback
    # Every reply counts: the job's tokens are the sum of all six.
    replies = sum(r.usage.output_tokens for r in outcome.rounds)
    assert replies == outcome.usage.output_tokens and outcome.usage.rounds == 2
    assert total_tokens(outcome.usage) <= settings.token_budget


def test_one_gpu_verifies_the_round_one_candidate_after_another(fake_api, settings, key, task, plan):
    settings = settings.replace(candidates_per_round=2, rounds=1)
    api = fake_api(Reply(variant("wrong")), Reply(variant("faster")))
    verifier = ParallelVerifier(slots=1, judge=judge, delay_s=0.05)
    outcome = LlmCoder(settings, verifier=verifier, api_key=key, config=config_for(api)).run(task, plan)
    assert verifier.most_at_once == 1 and len(verifier.seen) == 2
    assert outcome.ok and "variant faster" in outcome.candidate.cuda_sources["kernel.cu"]
    assert not outcome.target_reached and outcome.failure == ""


def test_the_token_budget_bounds_how_many_replies_a_round_asks_for(fake_api, settings, key, task, plan):
    # Each reply costs about 5.5k tokens (its request about what the Coder estimates, and 1k out):
    # 25k pays for three replies, then for one, then for none.
    settings = settings.replace(candidates_per_round=3, rounds=5, token_budget=25_000)
    api = fake_api(*[Reply(variant("wrong"), input_tokens=4_500, output_tokens=1_000) for _ in range(8)])
    verifier = ParallelVerifier(slots=3, judge=judge, delay_s=0.0)
    outcome = LlmCoder(settings, verifier=verifier, api_key=key, config=config_for(api)).run(task, plan)
    assert outcome.failure == "budget" and "token budget (25,000) is used up" in outcome.message
    per_round = [1 + len(r.others) for r in outcome.rounds]
    assert per_round == [3, 1]  # the second round asked for what the budget could still pay for
    assert sum(per_round) == len(api.requests)
    assert total_tokens(outcome.usage) <= settings.token_budget
