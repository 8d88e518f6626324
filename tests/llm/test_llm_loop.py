"""The plan → code → verify → refine loop, end to end: real SDK, fake Messages API, scripted Verifier."""

from __future__ import annotations

import pytest

from stitch_lsp.coders.llm.coder import LlmCoder, LlmCoderError
from stitch_lsp.verify.rubric import ANTI_HACKING, rubric_findings
from stitch_lsp.findings import Severity
from stitch_lsp.verdict import VerdictStatus

from .candidates import BROKEN_CUDA, HACKING_MODULE, MODULE, WRONG_CUDA, reply
from .conftest import config_for
from .fake_messages_api import ApiError, Reply
from .verifiers import ScriptedVerifier, compile_error, correct, flagged_at_run_time, incorrect


def make_coder(settings, key, api, verifier, **kw):
    return LlmCoder(settings, verifier=verifier, api_key=key, config=config_for(api), **kw)


def last_user_text(request) -> str:
    return request.message_texts("user")[-1]


@pytest.mark.nvcc
def test_compile_error_in_round_1_fixed_in_round_2_with_real_nvcc(fake_api, settings, key, task, plan):
    api = fake_api(Reply(reply(cuda=BROKEN_CUDA)), Reply(reply()))
    verifier = ScriptedVerifier(correct(2.4), nvcc=True)
    events = []
    outcome = make_coder(settings, key, api, verifier).run(task, plan, report=events.append)

    assert outcome.ok, outcome.message
    assert outcome.candidate.cuda_sources["kernel.cu"] == verifier.seen[1].cuda_sources["kernel.cu"]
    assert outcome.rounds[0].verdict.status is VerdictStatus.COMPILE_ERROR
    feedback = last_user_text(api.requests[1])
    assert "round 1 of 3" in feedback
    # nvcc notices the missing ";" of line 8 on line 9, and says so; the line is quoted.
    assert 'kernel.cu:9:9: error: expected a ";"' in feedback
    assert "   9 |         out[i] = (v != v ? v" in feedback
    assert len(api.requests) == 2  # 2.4x reached the 2.0x target: no third round
    assert outcome.target_reached
    assert any("Round 2/3" in e.message and "tokens so far" in e.message for e in events)


def test_compile_error_feedback_quotes_the_line_and_the_fix_is_offered(fake_api, settings, key, task, plan):
    api = fake_api(Reply(reply(cuda=BROKEN_CUDA)), Reply(reply()))
    verifier = ScriptedVerifier(compile_error(7, 'expected a ";"'), correct(2.4))
    outcome = make_coder(settings, key, api, verifier).run(task, plan)
    assert outcome.ok
    feedback = last_user_text(api.requests[1])
    assert 'kernel.cu:8:1: error: expected a ";"' in feedback
    assert "   8 |         float v = x[i]" in feedback
    assert "Next: fix the compile errors" in feedback
    # The second request continues the conversation: reply 1 is in it, then the feedback.
    assert api.requests[1].message_texts("assistant")[0].startswith("One grid-stride")
    assert outcome.verdict.usage.rounds == 2
    assert outcome.verdict.usage.cost_usd > 0
    per_round = [r.verdict.usage for r in outcome.rounds]
    assert [u.rounds for u in per_round] == [1, 1]
    assert sum(u.output_tokens for u in per_round) == outcome.verdict.usage.output_tokens
    assert "2 rounds" in outcome.message and "$" in outcome.message


def test_wrong_answer_fixed(fake_api, settings, key, task, plan):
    api = fake_api(Reply(reply(cuda=WRONG_CUDA)), Reply(reply()))
    verifier = ScriptedVerifier(incorrect({"seed-1": 3.2, "seed-2": 2.9}), correct(2.2))
    outcome = make_coder(settings, key, api, verifier).run(task, plan)
    assert outcome.ok and outcome.candidate.cuda_sources["kernel.cu"] == verifier.seen[1].cuda_sources["kernel.cu"]
    feedback = last_user_text(api.requests[1])
    assert "Correctness: 5 of 7 trials passed (dtype float32, atol 1e-05, rtol 1e-05)" in feedback
    assert "FAILED seed-1 (random): max abs err 3.2" in feedback
    assert "Next: fix correctness first" in feedback


def test_hacking_candidate_flagged_at_run_time_is_never_offered(fake_api, settings, key, task, plan, tmp_path,
                                                               monkeypatch):
    # A hack only the dynamic checks catch: the static screen finds nothing here.
    monkeypatch.setattr("stitch_lsp.coders.llm.coder.static_flags", lambda candidate: [])
    monkeypatch.setattr("stitch_lsp.verify.rubric.static_flags", lambda candidate: [])
    settings = settings.replace(rounds=2)
    api = fake_api(Reply(reply(module=HACKING_MODULE)), Reply(reply(module=HACKING_MODULE)))
    verifier = ScriptedVerifier(flagged_at_run_time(50.0), flagged_at_run_time(50.0))
    outcome = make_coder(settings, key, api, verifier).run(task, plan)

    assert not outcome.ok  # 50x, and still not offered
    assert outcome.failure == "rounds_exhausted"
    verdict = outcome.rounds[0].verdict
    anti = next(s for s in verdict.rubric if s.dimension == ANTI_HACKING)
    assert anti.score == 1 and any("HACK001" in r for r in anti.reasons)
    feedback = last_user_text(api.requests[1])
    assert "Anti-hacking checks REJECTED this candidate" in feedback and "HACK001 while running" in feedback
    findings = rubric_findings(verdict, outcome.rounds[0].candidate, module_path=str(tmp_path / "fused.py"),
                               kernel_path=str(tmp_path / "kernel.cu"))
    hack = [f for f in findings if f.code == "HACK001"]
    assert hack and hack[0].severity is Severity.ERROR and hack[0].path.endswith("fused.py")
    coverage = [f for f in findings if f.code == "rubric-operator-coverage" and "torch.relu" in f.message]
    assert coverage and coverage[0].range.start.line == HACKING_MODULE.splitlines().index(
        "        return torch.relu(x) * self.scale")


def test_hacking_candidate_is_rejected_by_static_checks_before_it_runs(fake_api, settings, key, task, plan):
    pytest.importorskip("stitch_lsp.verify.anti_hacking")
    api = fake_api(Reply(reply(module=HACKING_MODULE)), Reply(reply()))
    verifier = ScriptedVerifier(correct(2.5))
    outcome = make_coder(settings, key, api, verifier).run(task, plan)
    assert outcome.ok
    assert len(verifier.seen) == 1 and verifier.seen[0].module_source == MODULE  # the hack never ran
    first = outcome.rounds[0].verdict
    assert first.status is VerdictStatus.HACKING and first.hack_flags
    assert next(s for s in first.rubric if s.dimension == ANTI_HACKING).score == 1


def test_a_correct_verdict_with_a_flag_is_still_not_offered(fake_api, settings, key, task, plan):
    settings = settings.replace(rounds=1)
    flagged = correct(40.0)
    flagged.hack_flags = flagged_at_run_time().hack_flags  # status says correct, a flag says otherwise
    api = fake_api(Reply(reply()))
    outcome = make_coder(settings, key, api, ScriptedVerifier(flagged)).run(task, plan)
    assert not outcome.ok and outcome.candidate is None


def test_bad_replies_each_end_their_round_with_a_reason_the_model_sees(fake_api, settings, key, task, plan):
    settings = settings.replace(rounds=5)
    missing_import = MODULE.replace("import torch\n", "import torch\nimport fused_ops_extra\n", 1)
    api = fake_api(
        Reply("The kernel should use float4 loads and a grid-stride loop."),
        Reply(reply() + "\n```python\n" + MODULE + "```\n"),
        Reply("```triton\n@triton.jit\ndef k(x): pass\n```\n```python\n" + MODULE + "```\n"),
        Reply(reply(module=missing_import)),
        Reply(reply()[:400], stop_reason="max_tokens", output_tokens=16_000),
    )
    verifier = ScriptedVerifier()
    outcome = make_coder(settings, key, api, verifier).run(task, plan)

    assert verifier.seen == []  # nothing unusable reached the Verifier
    assert outcome.failure == "rounds_exhausted" and not outcome.ok
    reasons = ["had no code block", "2 ```python blocks", "wrong language (```triton)",
               "imports `fused_ops_extra`, which is not available"]
    for number, reason in enumerate(reasons, start=1):
        sent_next = "\n".join(api.requests[number].message_texts("user"))
        assert reason in sent_next, (number, reason)
        assert reason.split(",")[0] in outcome.rounds[number - 1].problem
    assert "cut off" in outcome.rounds[4].problem
    assert outcome.message.startswith("No verified candidate after 5 rounds.")
    for reason in ("no code block", "2 ```python blocks", "wrong language", "fused_ops_extra", "cut off"):
        assert reason in outcome.message


def test_reply_cut_at_the_token_limit_goes_back_as_feedback(fake_api, settings, key, task, plan):
    api = fake_api(Reply(reply()[:500], stop_reason="max_tokens", output_tokens=16_000), Reply(reply()))
    outcome = make_coder(settings, key, api, ScriptedVerifier(correct(2.1))).run(task, plan)
    assert outcome.ok
    feedback = last_user_text(api.requests[1])
    assert "Your reply was cut off: the reply hit its token limit (16000 output tokens)" in feedback


def test_token_budget_ends_the_job_clearly(fake_api, settings, key, task, plan):
    settings = settings.replace(token_budget=14_000)
    api = fake_api(Reply(reply(cuda=BROKEN_CUDA), input_tokens=4_000, output_tokens=9_500), Reply(reply()))
    outcome = make_coder(settings, key, api, ScriptedVerifier(compile_error(7, 'expected a ";"'))).run(task, plan)
    first_max = api.requests[0].body["max_tokens"]
    assert first_max < 14_000 - 3_000  # the request itself was capped by what the budget left
    assert len(api.requests) == 1
    assert outcome.failure == "budget"
    assert "Stopped before round 2: The token budget (14,000) is used up (13,500 tokens)" in outcome.message


def test_replans_after_two_rounds_without_progress(fake_api, settings, key, task, plan):
    settings = settings.replace(rounds=3)
    api = fake_api(Reply(reply(cuda=BROKEN_CUDA)), Reply(reply(cuda=BROKEN_CUDA)), Reply(reply()))
    verifier = ScriptedVerifier(compile_error(7, 'expected a ";"'), compile_error(7, 'expected a ";"'), correct(2.2))
    replans = []

    def replanner(task_, plan_, records):
        replans.append(len(records))
        return plan_.__class__(task_key=plan_.task_key, groups=plan_.groups, notes=["split differently"])

    outcome = make_coder(settings, key, api, verifier, replanner=replanner).run(task, plan)
    assert outcome.ok and replans == [2]
    third = api.requests[2]
    assert len(third.body["messages"]) == 1  # a fresh conversation
    opening = third.message_texts("user")[0]
    assert "Earlier attempts (none was accepted)" in opening
    assert "round 1: compile error" in opening and "round 2: compile error" in opening
    assert "Planner note: split differently" in opening
    assert outcome.rounds[1].replanned_after
    # The repeated error costs skill compliance in round 2's rubric.
    skill = next(s for s in outcome.rounds[1].verdict.rubric if s.dimension == "skill_compliance")
    assert skill.score <= 3 and "same compile error" in " ".join(skill.reasons)


def test_stops_early_at_the_target_speedup(fake_api, settings, key, task, plan):
    api = fake_api(Reply(reply()), Reply("unused"), Reply("unused"))
    outcome = make_coder(settings, key, api, ScriptedVerifier(correct(3.0))).run(task, plan)
    assert outcome.ok and outcome.target_reached and len(api.requests) == 1
    assert "target 2x reached" in outcome.message


def test_below_target_keeps_refining_and_the_best_wins(fake_api, settings, key, task, plan):
    cudas = [WRONG_CUDA.replace("scale * scale", "scale /*1*/"), WRONG_CUDA.replace("scale * scale", "scale /*2*/"),
             WRONG_CUDA.replace("scale * scale", "scale /*3*/")]
    api = fake_api(*[Reply(reply(cuda=c)) for c in cudas])
    verifier = ScriptedVerifier(correct(1.2), correct(1.6), correct(1.4))
    outcome = make_coder(settings, key, api, verifier).run(task, plan)
    assert outcome.ok and not outcome.target_reached
    assert "/*2*/" in outcome.candidate.cuda_sources["kernel.cu"]
    assert "the 2x target was not reached" in outcome.message
    assert "Correct. Timing:" in last_user_text(api.requests[1]) and "target 2x" in last_user_text(api.requests[1])


def test_prompt_caching_markers_across_rounds(fake_api, settings, key, task, plan):
    api = fake_api(Reply(reply(cuda=BROKEN_CUDA)), Reply(reply(), cache_read_input_tokens=4_000))
    outcome = make_coder(settings, key, api, ScriptedVerifier(compile_error(7, "x"), correct(2.5))).run(task, plan)
    first, second = api.requests
    for request in (first, second):
        marked = request.cache_marked_blocks()
        assert any("CUDA skills guide" in b["text"] for b in marked)
        assert any(b["text"].startswith("# Task: relu_scale") for b in marked)
        assert len(marked) <= 4
    # The system prompt and task are byte-identical between rounds (so the cache can match).
    assert first.body["system"] == second.body["system"]
    assert first.body["messages"][0]["content"][0] == second.body["messages"][0]["content"][0]
    # Round 2 marks the newest turn too, so round 3 would read all of round 2 from the cache.
    assert "cache_control" in second.body["messages"][-1]["content"][-1]
    assert outcome.usage.cache_read_tokens == 4_000


def test_no_key_is_a_clear_message_and_sends_nothing(fake_api, settings, task, plan, monkeypatch):
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    from stitch_lsp.coders.llm.key import KEYS

    KEYS.set_client_key(None)
    api = fake_api(Reply(reply()))
    outcome = LlmCoder(settings, verifier=ScriptedVerifier(), config=config_for(api)).run(task, plan)
    assert outcome.failure == "no_key" and "No Anthropic API key" in outcome.message
    assert api.requests == []


def test_bad_key_is_a_clear_message(fake_api, settings, task, plan):
    from stitch_lsp.coders.llm.key import Secret

    api = fake_api(Reply(reply()), api_key="sk-ant-the-real-one")
    outcome = make_coder(settings, Secret("sk-ant-wrong"), api, ScriptedVerifier()).run(task, plan)
    assert outcome.failure == "bad_key"
    assert "rejected the API key" in outcome.message and len(api.requests) == 1


def test_api_failing_mid_job_keeps_what_was_learnt(fake_api, settings, key, task, plan):
    api = fake_api(Reply(reply(cuda=BROKEN_CUDA)), ApiError(500), ApiError(500), ApiError(500))
    outcome = make_coder(settings, key, api, ScriptedVerifier(compile_error(7, 'expected a ";"'))).run(task, plan)
    assert outcome.failure == "server" and not outcome.ok
    assert "failed 3 times in a row; giving up" in outcome.message and "(after 1 round)" in outcome.message
    assert "round 1: compile error" in outcome.message
    assert len(api.requests) == 4


def test_generate_is_the_one_round_coder_seam(fake_api, settings, key, task, plan):
    api = fake_api(Reply("no code, sorry"), Reply(reply(cuda=BROKEN_CUDA)), Reply(reply()))
    coder = make_coder(settings, key, api, None)
    with pytest.raises(LlmCoderError) as info:
        coder.generate(task, plan)
    assert "no code block" in info.value.reason
    first = coder.generate(task, plan)
    assert first.cuda_sources["kernel.cu"] == BROKEN_CUDA
    second = coder.generate(task, plan, compile_error(7, 'expected a ";"'))
    assert "float v = x[i];" in second.cuda_sources["kernel.cu"]
    assert 'expected a ";"' in last_user_text(api.requests[2])
    assert coder.usage.rounds == 0 or coder.usage.output_tokens > 0


def test_cancel_mid_stream_ends_the_job_promptly(fake_api, settings, key, task, plan):
    import threading
    import time

    from stitch_lsp.cancellation import CancelToken

    slow = Reply(reply(), chunk_chars=10, delay_s=0.05)  # ~7 s for the whole answer
    api = fake_api(slow)
    cancel = CancelToken()
    events = []

    def report(event):
        events.append(event)
        if "writing" in event.message:
            threading.Timer(0.2, cancel.cancel, args=("user cancelled",)).start()

    started = time.monotonic()
    outcome = make_coder(settings, key, api, ScriptedVerifier()).run(task, plan, cancel=cancel, report=report)
    assert outcome.failure == "cancelled" and outcome.message.startswith("Cancelled")
    assert time.monotonic() - started < 4.0
    assert any("tokens so far" in e.message for e in events)


def test_the_format_example_in_the_system_prompt_is_itself_a_valid_clean_binding():
    from stitch_lsp.coders.llm.prompt import KERNEL_FILE, loader_usage
    from stitch_lsp.coders.llm.reply import check_module
    from stitch_lsp.verify.anti_hacking import static_flags

    example = loader_usage()
    assert "load_kernel(_SOURCE" in example and f'with_name("{KERNEL_FILE}")' in example
    assert check_module(example) == ""
    assert static_flags(example) == []


def test_no_gpu_stops_the_loop_after_one_round(fake_api, settings, key, task, plan):
    from stitch_lsp.verdict import Verdict

    api = fake_api(Reply(reply()), Reply(reply()), Reply(reply()))
    no_gpu = Verdict(VerdictStatus.NO_GPU, summary="no CUDA device")
    outcome = make_coder(settings, key, api, ScriptedVerifier(no_gpu)).run(task, plan)
    assert outcome.failure == "no_gpu" and len(api.requests) == 1
    assert "No CUDA device" in outcome.message
    assert outcome.verdict.status is VerdictStatus.NO_GPU and outcome.kept is not None


def test_the_task_text_tells_the_coder_which_inputs_arrive_transposed():
    """A recording saw q as a transposed view: the Coder is told, so its kernel does not index q as contiguous."""
    from stitch_lsp.coders.llm.prompt import task_text
    from stitch_lsp.pipeline import Task, TensorSpec

    task = Task(name="attn", source="class Model: ...", shape_source="recorded (model.py, line 62)",
                inputs=[TensorSpec((2, 4, 16, 16), "float32", (1024, 16, 64, 1)), TensorSpec((2, 16, 64))])
    text = task_text(task)
    assert "2x4x16x16 float32 (not contiguous: strides 1024, 16, 64, 1)" in text
    assert "2x16x64 float32," not in text and text.count("not contiguous") == 1
