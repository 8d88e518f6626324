"""The rule-based rubric, its findings, and the optional model judge (through the fake API)."""

from __future__ import annotations

import json

import pytest

from stitch_lsp.coders.llm.coder import LlmCoder
from stitch_lsp.coders.llm.judge import JudgeError, parse_scores
from stitch_lsp.verify.rubric import (
    ANTI_HACKING,
    CUDA_ENGINEERING,
    OPERATOR_COVERAGE,
    SKILL_COMPLIANCE,
    RubricContext,
    apply_rubric,
    passes,
    rubric_findings,
    score_rules,
)
from stitch_lsp.findings import Severity
from stitch_lsp.pipeline import Candidate
from stitch_lsp.verdict import KernelProfile, KernelResources, NcuRule, Profile, VerdictStatus

from .candidates import GOOD_CUDA, HACKING_MODULE, MODULE, reply
from .conftest import config_for
from .fake_messages_api import Reply
from .verifiers import ScriptedVerifier, compile_error, correct, flagged_at_run_time, incorrect


def by_dim(scores):
    return {s.dimension: s for s in scores}


def good() -> Candidate:
    return Candidate(module_source=MODULE, cuda_sources={"kernel.cu": GOOD_CUDA}, coder="llm")


def test_clean_fast_candidate_scores_well(plan):
    verdict = correct(2.5)
    verdict.profile = Profile(status="profiled", kernels=[KernelProfile(
        "relu_scale_kernel", duration_us=12.0, bound="memory", dram_throughput_pct=91.0, achieved_occupancy_pct=80.0)])
    scores = by_dim(score_rules(verdict, good(), RubricContext(plan=plan)))
    assert scores[ANTI_HACKING].score == 5
    assert scores[CUDA_ENGINEERING].score == 5
    assert scores[OPERATOR_COVERAGE].score == 5
    assert scores[SKILL_COMPLIANCE].score == 5
    assert all(s.judge == "rules" and s.reasons for s in scores.values())


def test_flagged_candidate_scores_1_and_is_never_offered(plan):
    verdict = flagged_at_run_time(60.0)
    scored = apply_rubric(verdict, Candidate(HACKING_MODULE, {"kernel.cu": GOOD_CUDA}), RubricContext(plan=plan))
    anti = by_dim(scored.rubric)[ANTI_HACKING]
    assert anti.score == 1 and "HACK001" in anti.reasons[0] and "never offered" in anti.reasons[-1]
    assert not passes(scored)
    coverage = by_dim(scored.rubric)[OPERATOR_COVERAGE]
    line = HACKING_MODULE.splitlines().index("        return torch.relu(x) * self.scale") + 1
    assert coverage.score < 5 and f"torch.relu (line {line})" in " ".join(coverage.reasons)


def test_a_correct_verdict_that_the_static_checks_flag_becomes_hacking(monkeypatch):
    from stitch_lsp.verdict import HackFlag

    monkeypatch.setattr("stitch_lsp.verify.rubric.static_flags",
                        lambda source: [HackFlag("HACK002", "try/except fallback to PyTorch", line=17)])
    scored = apply_rubric(correct(3.0), good())
    assert scored.status is VerdictStatus.HACKING and not passes(scored)
    assert "HACK002" in scored.summary


def test_real_static_checks_catch_pytorch_compute_in_forward():
    pytest.importorskip("stitch_lsp.verify.anti_hacking")
    scored = apply_rubric(correct(3.0), Candidate(HACKING_MODULE, {"kernel.cu": GOOD_CUDA}))
    assert scored.hack_flags and scored.status is VerdictStatus.HACKING
    assert by_dim(scored.rubric)[ANTI_HACKING].score == 1


def test_engineering_reflects_profile_spills_and_floor(plan):
    verdict = correct(1.1)
    verdict.timing.candidate.median_ms = 0.200  # 200 µs against an 11.2 µs floor
    verdict.compile.kernels = [KernelResources("relu_scale_kernel", registers=255, spill_stores=64, spill_loads=64)]
    verdict.profile = Profile(status="profiled", kernels=[KernelProfile(
        "relu_scale_kernel", bound="memory", dram_throughput_pct=18.0, achieved_occupancy_pct=12.0,
        occupancy_limiter="registers",
        rules=[NcuRule("UncoalescedGlobalAccess", "stride 32 access", "OPT", 61.0)])])
    eng = by_dim(score_rules(verdict, good(), RubricContext(plan=plan)))[CUDA_ENGINEERING]
    assert eng.score == 1
    text = " ".join(eng.reasons)
    for part in ("spills registers", "6% of the floor", "18% of DRAM peak", "12% occupancy, limited by registers",
                 "UncoalescedGlobalAccess: est. 61%"):
        assert part in text


def test_unmeasured_engineering_is_capped():
    eng = by_dim(score_rules(correct(2.0).__class__(VerdictStatus.INCORRECT, "x"), good()))[CUDA_ENGINEERING]
    assert eng.score == 3 and "not timed or profiled" in eng.reasons[-1]
    assert by_dim(score_rules(compile_error(3, "x"), good()))[CUDA_ENGINEERING].score == 1


def test_skill_compliance_sees_ignored_feedback_and_extra_kernels(plan):
    two_kernels = GOOD_CUDA + GOOD_CUDA.replace("relu_scale_kernel", "second_kernel")
    candidate = Candidate(MODULE, {"kernel.cu": two_kernels})
    context = RubricContext(plan=plan, previous=incorrect({"seed-1": 1.0}))
    skill = by_dim(score_rules(incorrect({"seed-1": 1.0}), candidate, context))[SKILL_COMPLIANCE]
    assert skill.score == 3
    assert "defines 2 (relu_scale_kernel, second_kernel)" in skill.reasons[0]
    assert "trial seed-1 still fails" in skill.reasons[1]
    fixed = by_dim(score_rules(correct(2.0), good(), RubricContext(plan=plan, previous=compile_error(3, "x"))))
    assert fixed[SKILL_COMPLIANCE].score == 5 and "fixed last round's compile error" in fixed[SKILL_COMPLIANCE].reasons


def test_template_coder_verdicts_get_the_rubric_too(plan):
    template = Candidate(MODULE.replace("return out", "return torch.tanh(out)"), {"kernel.cu": GOOD_CUDA},
                         coder="template", uncovered_ops=["aten.tanh"])
    scores = by_dim(score_rules(correct(1.5), template, RubricContext(plan=plan)))
    assert scores[OPERATOR_COVERAGE].score <= 3
    assert "left to PyTorch by design: aten.tanh" in scores[OPERATOR_COVERAGE].reasons


def test_findings_land_on_the_generated_files(plan):
    two_kernels = GOOD_CUDA + GOOD_CUDA.replace("relu_scale_kernel", "second_kernel")
    candidate = Candidate(HACKING_MODULE, {"kernel.cu": two_kernels})
    verdict = apply_rubric(incorrect({"seed-1": 1.0}), candidate,
                           RubricContext(plan=plan, previous=incorrect({"seed-1": 1.0})))
    findings = rubric_findings(verdict, candidate,
                               module_path="/ws/.stitch/fused/relu.py", kernel_path="/ws/.stitch/fused/kernel.cu")
    codes = {f.code: f for f in findings}
    assert "rubric-skill-compliance" in codes
    skill = codes["rubric-skill-compliance"]
    assert skill.path.endswith("kernel.cu") and skill.range.start.line == GOOD_CUDA.splitlines().index(
        next(line for line in GOOD_CUDA.splitlines() if "__global__" in line))
    assert skill.severity is Severity.INFO and skill.source == "stitch rubric"
    coverage = [f for f in findings if f.code == "rubric-operator-coverage"]
    assert coverage and coverage[0].path.endswith("relu.py") and coverage[0].severity is Severity.WARNING


def judge_answer(anti=5, eng=4, cov=5, skill=4) -> str:
    return "Here is my review.\n" + json.dumps({
        "anti_hacking": {"score": anti, "reasons": ["computes in its kernel"]},
        "cuda_engineering": {"score": eng, "reasons": ["scalar loads; float4 would help"]},
        "operator_coverage": {"score": cov, "reasons": ["relu and scale fused"]},
        "skill_compliance": {"score": skill, "reasons": ["follows the plan"]},
    })


def test_model_judge_adds_its_scores(fake_api, settings, key, task, plan):
    settings = settings.replace(judge=True)
    api = fake_api(Reply(reply()), Reply(judge_answer(), input_tokens=2000, output_tokens=150))
    outcome = LlmCoder(settings, verifier=ScriptedVerifier(correct(2.5)), api_key=key,
                       config=config_for(api)).run(task, plan)
    assert outcome.ok
    model = [s for s in outcome.verdict.rubric if s.judge == "model"]
    assert {s.dimension for s in model} == {ANTI_HACKING, CUDA_ENGINEERING, OPERATOR_COVERAGE, SKILL_COMPLIANCE}
    assert "float4 would help" in by_dim(model)[CUDA_ENGINEERING].reasons[0]
    judge_request = api.requests[1]
    assert "You review CUDA kernels" in judge_request.system_text
    assert "relu_scale_kernel" in judge_request.message_texts("user")[0]
    assert outcome.usage.input_tokens == 1200 + 2000  # the judge's tokens count against the job


def test_model_judge_calling_it_a_hack_blocks_the_offer(fake_api, settings, key, task, plan):
    settings = settings.replace(judge=True)
    api = fake_api(Reply(reply()), Reply(judge_answer(anti=1)))
    outcome = LlmCoder(settings, verifier=ScriptedVerifier(correct(9.0)), api_key=key,
                       config=config_for(api)).run(task, plan)
    assert not outcome.ok and outcome.failure == "judge_rejected"
    assert "The model judge rejected the round-1 candidate as a hack" in outcome.message


def test_unusable_judge_answer_keeps_the_rule_based_verdict(fake_api, settings, key, task, plan):
    settings = settings.replace(judge=True)
    api = fake_api(Reply(reply()), Reply("I'd rather not score this."))
    outcome = LlmCoder(settings, verifier=ScriptedVerifier(correct(2.5)), api_key=key,
                       config=config_for(api)).run(task, plan)
    assert outcome.ok
    assert "The model judge gave no usable answer" in outcome.message
    assert all(s.judge == "rules" for s in outcome.verdict.rubric)


@pytest.mark.parametrize("text, problem", [
    ("nothing", "no JSON"),
    ('{"anti_hacking": {"score": 9}}', "not an integer from 1 to 5"),
    ('{"anti_hacking": {"score": 5, "reasons": []}}', "no score for cuda_engineering"),
])
def test_judge_answers_are_validated(text, problem):
    with pytest.raises(JudgeError, match=problem):
        parse_scores(text)


UNGUARDED_CUDA = GOOD_CUDA.replace(
    "for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;\n"
    "         i += (long long)gridDim.x * blockDim.x) {",
    "{ int i = blockIdx.x * blockDim.x + threadIdx.x;")


def test_stitchs_cuda_rules_count_in_engineering_and_land_on_the_kernel(plan):
    assert UNGUARDED_CUDA != GOOD_CUDA
    candidate = Candidate(MODULE, {"kernel.cu": UNGUARDED_CUDA})
    verdict = apply_rubric(correct(2.5), candidate, RubricContext(plan=plan))
    eng = by_dim(verdict.rubric)[CUDA_ENGINEERING]
    assert eng.score == 4 and eng.reasons[0].startswith("STC001 (kernel.cu:")
    findings = rubric_findings(verdict, candidate, module_path="/ws/m.py", kernel_path="/ws/.stitch/t/kernel.cu")
    stc = [f for f in findings if f.code == "STC001"]
    assert stc and stc[0].path == "/ws/.stitch/t/kernel.cu" and stc[0].severity is Severity.WARNING


def test_static_findings_go_back_to_the_model_with_the_line(fake_api, settings, key, task, plan):
    api = fake_api(Reply(reply(cuda=UNGUARDED_CUDA)), Reply(reply()))
    outcome = LlmCoder(settings, verifier=ScriptedVerifier(incorrect({"odd-shape": 1.0}), correct(2.5)),
                       api_key=key, config=config_for(api)).run(task, plan)
    assert outcome.ok
    feedback = api.requests[1].message_texts("user")[-1]
    assert "Static analysis of your CUDA (Stitch's rules):" in feedback
    assert "kernel.cu:" in feedback and "STC001" in feedback
    assert "| { int i = blockIdx.x" in feedback or "out[i]" in feedback
