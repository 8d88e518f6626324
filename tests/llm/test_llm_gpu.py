"""On a GPU: a scripted model conversation whose candidates really compile and run.

The model is the fake Messages API (no network); the Verifier is the real one
(worker process, NVRTC through the runtime loader, correctness trials, timing).
Round 1 fails to compile, or computes the wrong answer; the Verifier's feedback
goes back; round 2 is the correct fused kernel and is offered.

Set STITCH_TEST_OUT to a folder to get a JSON summary of each conversation there.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from stitch_lsp.coders.llm.coder import LlmCoder
from stitch_lsp.verify.rubric import rubric_findings
from stitch_lsp.serde import to_dict
from stitch_lsp.verdict import VerdictStatus
from stitch_lsp.verify.service import VerifyOptions

from .candidates import BROKEN_CUDA, GOOD_CUDA, MODULE, SNEAKY_MODULE, WRONG_CUDA, reply
from .conftest import config_for
from .fake_messages_api import Reply

pytestmark = pytest.mark.gpu


def summary(name: str, outcome, api) -> None:
    """The conversation's record: to $STITCH_TEST_OUT/llm_gpu_<name>.json, else printed (pytest -s)."""
    data = {
        "test": name,
        "message": outcome.message,
        "usage": to_dict(outcome.usage),
        "rounds": [{
            "round": r.number,
            "status": r.verdict.status.value if r.verdict else None,
            "summary": r.verdict.summary if r.verdict else r.problem,
            "compile": to_dict(r.verdict.compile) if r.verdict and r.verdict.compile else None,
            "timing": to_dict(r.verdict.timing) if r.verdict else None,
            "trials": [to_dict(t) for t in r.verdict.correctness.trials] if r.verdict else [],
            "device": to_dict(r.verdict.device) if r.verdict and r.verdict.device else None,
            "rubric": [to_dict(s) for s in r.verdict.rubric] if r.verdict else [],
        } for r in outcome.rounds],
        "feedback_sent": [req.message_texts("user")[-1] for req in api.requests[1:]],
    }
    text = json.dumps(data, indent=1)
    out = os.environ.get("STITCH_TEST_OUT")
    if out:
        Path(out, f"llm_gpu_{name}.json").write_text(text)
    else:
        print(f"\n--- llm_gpu_{name}\n{text}")


def run_job(fake_api, settings, key, task, plan, verifier, first_cuda, options, first_module=MODULE):
    api = fake_api(Reply(reply(cuda=first_cuda, module=first_module)), Reply(reply()))
    events = []
    coder = LlmCoder(settings.replace(rounds=2, target_speedup=1.0), verifier=verifier, verify_options=options,
                     api_key=key, config=config_for(api))
    outcome = coder.run(task, plan, report=events.append)
    return outcome, api, events


def test_compile_error_then_correct_fused_kernel_on_the_gpu(fake_api, settings, key, task, plan, verifier):
    # No torch.compile baseline: its first compile alone can take most of the GPU run's time limit.
    options = VerifyOptions(compile_baseline=False)
    outcome, api, events = run_job(fake_api, settings, key, task, plan, verifier, BROKEN_CUDA, options)
    summary("compile_then_correct", outcome, api)
    assert len(outcome.rounds) == 2, outcome.message
    first, second = outcome.rounds
    assert first.verdict.status is VerdictStatus.COMPILE_ERROR, first.verdict.summary
    diags = first.verdict.compile.diagnostics
    assert diags and any(d.path.endswith("kernel.cu") and d.range.start.line in (7, 8) for d in diags), diags
    feedback = api.requests[1].message_texts("user")[-1]
    assert "Compilation failed" in feedback and "kernel.cu:" in feedback

    assert second.verdict.status is VerdictStatus.CORRECT, second.verdict.summary
    assert outcome.ok and outcome.verdict.offerable
    assert len(second.verdict.correctness.trials) >= 5 and all(t.passed for t in second.verdict.correctness.trials)
    timing = second.verdict.timing
    assert timing.status == "measured" and timing.speedup_vs_eager is not None
    # relu then mul is two memory-bound passes in eager PyTorch; one fused pass moves half the bytes.
    assert timing.speedup_vs_eager > 1.2, timing
    assert outcome.verdict.usage.rounds == 2
    findings = rubric_findings(outcome.verdict, outcome.candidate, module_path="m.py", kernel_path="kernel.cu")
    assert not [f for f in findings if f.code.startswith("HACK")]
    assert any("Round 2/2" in e.message for e in events)


def test_wrong_answer_then_correct_on_the_gpu(fake_api, settings, key, task, plan, verifier):
    options = VerifyOptions(compile_baseline=False)
    outcome, api, _ = run_job(fake_api, settings, key, task, plan, verifier, WRONG_CUDA, options)
    summary("wrong_then_correct", outcome, api)
    assert len(outcome.rounds) == 2, outcome.message
    first, second = outcome.rounds
    assert first.verdict.status is VerdictStatus.INCORRECT, first.verdict.summary
    assert first.verdict.correctness.failed_trials
    assert "FAILED" in api.requests[1].message_texts("user")[-1]
    assert second.verdict.status is VerdictStatus.CORRECT, second.verdict.summary
    assert outcome.ok


def test_hack_only_the_dynamic_checks_see_is_never_offered_on_the_gpu(fake_api, settings, key, task, plan,
                                                                     verifier):
    options = VerifyOptions(compile_baseline=False)
    outcome, api, _ = run_job(fake_api, settings, key, task, plan, verifier, GOOD_CUDA, options,
                              first_module=SNEAKY_MODULE)
    summary("dynamic_hack_then_correct", outcome, api)
    assert len(outcome.rounds) == 2, outcome.message
    first, second = outcome.rounds
    assert first.verdict.status is VerdictStatus.HACKING, first.verdict.summary
    assert any(f.dynamic and f.code == "HACK001" for f in first.verdict.hack_flags), first.verdict.hack_flags
    anti = next(s for s in first.verdict.rubric if s.dimension == "anti_hacking")
    assert anti.score == 1
    assert "REJECTED" in api.requests[1].message_texts("user")[-1]
    assert second.verdict.status is VerdictStatus.CORRECT, second.verdict.summary
    assert outcome.ok and outcome.candidate.module_source == MODULE
