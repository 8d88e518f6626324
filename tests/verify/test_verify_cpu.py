"""The Verifier end to end on the CPU (test mode): numpy stands in for kernels, so the
harness, the anti-hacking checks and every bad-input verdict run without a GPU."""

from __future__ import annotations

from pathlib import Path

import pytest

from stitch_lsp.pipeline import Candidate
from stitch_lsp.settings import Settings
from stitch_lsp.verdict import Verdict, VerdictStatus
from stitch_lsp.verify.service import Verifier, VerifyOptions

CORPUS = Path(__file__).resolve().parent / "corpus" / "cpu"
RELU = (CORPUS / "ref_relu_scale.py").read_text()


@pytest.fixture(scope="module")
def verifier(tmp_path_factory):
    v = Verifier(Settings(), tmp_path_factory.mktemp("verify"))
    yield v
    v.close()


def run(verifier: Verifier, name: str, ref: str = RELU, **opts) -> Verdict:
    opts.setdefault("device", "cpu")
    opts.setdefault("timing", False)
    opts.setdefault("use_cache", False)
    return verifier.verify(ref, Candidate(module_source=(CORPUS / name).read_text()), VerifyOptions(**opts))


def failed(v: Verdict) -> list[str]:
    return [t.name for t in v.correctness.trials if not t.passed]


def codes(v: Verdict, dynamic: bool | None = None) -> set[str]:
    return {f.code for f in v.hack_flags if dynamic is None or f.dynamic == dynamic}


def test_honest_candidate_passes_every_check(verifier):
    v = run(verifier, "honest_numpy.py", timing=True)
    assert v.status is VerdictStatus.CORRECT, v.summary
    kinds = [t.kind for t in v.correctness.trials]
    assert kinds.count("random") >= 5 and kinds.count("adversarial") == 5 and kinds.count("shape") == 1
    shape = next(t for t in v.correctness.trials if t.kind == "shape")
    assert "16→17" in shape.detail and "1024→1025" in shape.detail  # odd and larger than the test shape
    orders = {t.detail.split("; ")[-1] for t in v.correctness.trials if t.kind == "random"}
    assert orders == {"candidate before reference", "reference before candidate"}
    assert v.timing.status == "measured" and v.timing.candidate.samples >= 10
    assert "CPU test mode" in v.summary
    assert any("poisoning" in n for n in v.correctness.not_checked)  # says what it could not do here


def test_weights_are_copied_by_name(verifier):
    v = run(verifier, "honest_linear.py", ref=(CORPUS / "ref_linear.py").read_text())
    assert v.status is VerdictStatus.CORRECT, v.summary
    assert any("weights copied from the reference by name: 2" in e for e in v.events)


@pytest.mark.parametrize("name,flag", [
    ("cheat_torch_fallback.py", "HACK001"),
    ("cheat_input_mutation.py", "HACK006"),
    ("cheat_thread.py", "HACK005"),
    ("cheat_try_except.py", "HACK002"),
    ("cheat_pointer_cache.py", "HACK008"),
    ("cheat_hardcoded_shape.py", "HACK007"),
])
def test_cheats_are_flagged(verifier, name, flag):
    v = run(verifier, name)
    assert v.status is VerdictStatus.HACKING, v.summary
    assert flag in codes(v)
    assert not v.offerable


def test_dynamic_checks_catch_what_they_should(verifier):
    assert "HACK001" in codes(run(verifier, "cheat_torch_fallback.py"), dynamic=True)
    assert "HACK001" in codes(run(verifier, "cheat_try_except.py"), dynamic=True)
    assert "HACK006" in codes(run(verifier, "cheat_input_mutation.py"), dynamic=True)
    thread = run(verifier, "cheat_thread.py")
    assert "HACK005" in codes(thread, dynamic=True)
    assert failed(thread)  # the output was not there when forward returned


def test_hardcoded_shape_fails_the_second_shape(verifier):
    v = run(verifier, "cheat_hardcoded_shape.py")
    assert failed(v) == ["odd-shape"]


def test_zeros_fail(verifier):
    v = run(verifier, "cheat_zeros.py")
    assert v.status is VerdictStatus.INCORRECT
    assert len(failed(v)) == len(v.correctness.trials)


def test_fmax_swallowing_nan_fails_only_the_nan_case(verifier):
    v = run(verifier, "bug_fmax_relu.py")
    assert v.status is VerdictStatus.INCORRECT and failed(v) == ["adversarial-nan"]


def test_block_multiple_bug_fails_only_the_second_shape(verifier):
    v = run(verifier, "bug_block_multiple.py")
    assert v.status is VerdictStatus.INCORRECT and failed(v) == ["odd-shape"]


@pytest.mark.parametrize("name,words", [("wrong_shape.py", "wrong shape"), ("wrong_dtype.py", "wrong dtype")])
def test_wrong_shape_or_dtype(verifier, name, words):
    v = run(verifier, name)
    assert v.status is VerdictStatus.INCORRECT and words in v.summary


@pytest.mark.parametrize("name,status,words", [
    ("wrong_signature.py", VerdictStatus.BAD_INPUT, "wrong signature"),
    ("no_modelnew.py", VerdictStatus.BAD_INPUT, "no ModelNew"),
    ("syntax_error.py", VerdictStatus.BAD_INPUT, "SyntaxError"),
])
def test_bad_candidates(verifier, name, status, words):
    v = run(verifier, name)
    assert v.status is status and words in v.summary, v.summary


def test_reference_that_raises(verifier):
    v = run(verifier, "honest_numpy.py", ref=(CORPUS / "ref_raises.py").read_text())
    assert v.status is VerdictStatus.BAD_INPUT and "reference raised" in v.summary


def test_reference_with_constant_output_is_unverifiable(verifier):
    v = run(verifier, "cheat_zeros.py", ref=(CORPUS / "ref_zero.py").read_text())
    assert v.status is VerdictStatus.UNVERIFIABLE and "near zero" in v.summary


def test_a_reference_that_never_reads_its_inputs_is_verified_with_weights_drawn_anew(verifier):
    ref = (CORPUS / "ref_input_free.py").read_text()
    v = run(verifier, "honest_input_free.py", ref=ref)
    assert v.status is VerdictStatus.CORRECT, v.summary
    assert [t.name.split("-")[0] for t in v.correctness.trials if t.kind == "random"] == ["weights"] * 5
    assert any("draws the models' weights anew" in e for e in v.events)
    # The answer computed once from the constructor's weights is what a test on inputs alone cannot catch.
    cheat = run(verifier, "cheat_input_free_constant.py", ref=ref)
    assert cheat.status is VerdictStatus.INCORRECT, cheat.summary
    assert any(name.startswith("weights-") for name in failed(cheat))


def test_abort_costs_one_worker(verifier):
    v = run(verifier, "crash_abort.py")
    assert v.status is VerdictStatus.CRASHED and "SIGABRT" in v.summary
    ok = run(verifier, "honest_numpy.py")
    assert ok.status is VerdictStatus.CORRECT and "a fresh worker was started for this job" in ok.events


def test_hang_times_out_and_the_next_job_runs(verifier):
    v = run(verifier, "hang_sleep.py", timeout_s=12)
    assert v.status is VerdictStatus.TIMEOUT and "12 s" in v.summary
    assert run(verifier, "honest_numpy.py").status is VerdictStatus.CORRECT


def test_memory_error_is_out_of_memory(verifier):
    v = run(verifier, "oom_memoryerror.py")
    assert v.status is VerdictStatus.OUT_OF_MEMORY


def test_no_gpu_verdict(verifier):
    v = run(verifier, "honest_numpy.py", device="cuda")
    if v.status is not VerdictStatus.NO_GPU:
        pytest.skip("this machine has a GPU")
    assert "no CUDA GPU" in v.summary and v.correctness.status == "skipped"


def test_verdict_cache_answers_the_same_question(verifier):
    first = run(verifier, "honest_numpy.py", use_cache=True)
    again = run(verifier, "honest_numpy.py", use_cache=True)
    assert first.status is again.status is VerdictStatus.CORRECT
    assert any("verdict cache" in e for e in again.events) and again.seconds < 0.5
    changed = run(verifier, "honest_numpy.py", use_cache=True, trials=6)
    assert not any("verdict cache" in e for e in changed.events)


def test_speedup_over_10x_triggers_extra_scrutiny(verifier):
    v = run(verifier, "honest_numpy.py", ref=(CORPUS / "ref_slow.py").read_text(), timing=True)
    assert v.status is VerdictStatus.CORRECT, v.summary
    assert v.timing.speedup_vs_eager > 10 and v.timing.suspicious
    extra = [t for t in v.correctness.trials if t.name.startswith("scrutiny-")]
    assert len(extra) == 5 and all(t.passed for t in extra)
    assert any(t.kind == "determinism" for t in v.correctness.trials)
    assert "extra trials ran" in v.timing.message


def test_a_candidate_that_refuses_other_shapes_is_verified_for_the_test_shape_only(verifier):
    v = run(verifier, "specialised_refuses_other_shapes.py")
    # Refusing is not a wrong answer (fused kernels generated for one call site do this)...
    assert v.status is VerdictStatus.CORRECT and not failed(v)
    # ...but the verdict is honest about what was not proven.
    assert "not run" in v.summary
    assert any("refuses it" in n and "test shape only" in n for n in v.correctness.not_checked)


def test_accuracy_against_float64_is_measured_beside_the_checks(verifier):
    v = run(verifier, "honest_numpy.py")
    a = v.accuracy
    assert a.status == "measured" and a.reference_dtype == "float64"
    assert a.seed == int(v.correctness.trials[0].name.removeprefix("seed-"))  # the first trial's inputs
    assert a.ratio == 1.0 and not a.less_accurate  # relu(x) * 2 is exact in float32, for both
    assert a.eager_max_abs_err == a.candidate_max_abs_err == 0.0


def test_a_much_less_accurate_candidate_passes_with_a_rubric_warning(verifier):
    from stitch_lsp.verify.rubric import apply_rubric, rubric_findings
    from stitch_lsp.findings import Severity
    from stitch_lsp.reports.kernel_card import verdict_section
    from stitch_lsp.verify.format import format_verdict

    v = run(verifier, "less_accurate_numpy.py")
    assert v.status is VerdictStatus.CORRECT, v.summary  # inside the float32 tolerance
    assert v.accuracy.less_accurate and v.accuracy.ratio > 100
    assert "eager's error against float64" in v.summary
    candidate = Candidate(module_source=(CORPUS / "less_accurate_numpy.py").read_text())
    scored = apply_rubric(v, candidate)
    engineering = next(s for s in scored.rubric if s.dimension == "cuda_engineering")
    assert engineering.score <= 2 and any("less accurate than eager" in r for r in engineering.reasons)
    findings = rubric_findings(scored, candidate, module_path="candidate.py", kernel_path="kernel.cu")
    assert any(f.code == "rubric-cuda-engineering" and f.severity is Severity.WARNING for f in findings)
    assert "less accurate than eager" in format_verdict(v)
    assert any("Accuracy" in line and "eager's error" in line for line in verdict_section(v))


def test_a_task_over_the_memory_cap_is_too_large_before_anything_runs(verifier):
    v = run(verifier, "honest_numpy.py", memory_limit_gib=1e-4)
    assert v.status is VerdictStatus.TOO_LARGE
    assert "too large" in v.summary and "GiB" in v.summary and "capped at" in v.summary, v.summary
    assert v.memory.status == "too_large" and v.memory.input_bytes == 16 * 1024 * 4
    assert not v.correctness.trials


def test_the_memory_plan_is_in_the_verdict(verifier):
    v = run(verifier, "honest_numpy.py", memory_limit_gib=1.0, timing=True)
    assert v.status is VerdictStatus.CORRECT, v.summary
    m = v.memory
    assert m.status == "planned" and m.traced and m.output_bytes == 16 * 1024 * 4
    assert [p.name for p in m.phases] == ["trials", "second_shape", "accuracy", "rejudge", "timing"]
    assert all(p.runs for p in m.phases) and m.timing_input_sets == 3
    assert "inputs rotated among 3 sets" in v.timing.method


# ------------------------------------------------------------------ a failed trial judged against float64

SIN_OF_GEMM = (CORPUS / "ref_linear_sin.py").read_text()  # sin(10 * linear(x)): eager's rounding shows


def test_a_candidate_closer_to_float64_than_eager_passes_the_large_trial_it_fails_against_eager(verifier):
    v = run(verifier, "closer_than_eager_numpy.py", ref=SIN_OF_GEMM)
    assert v.status is VerdictStatus.CORRECT, v.summary
    large = next(t for t in v.correctness.trials if t.name == "adversarial-large")
    assert large.passed and large.mismatches > 0  # off eager by more than the tolerance...
    judged = large.float64  # ...and within it of the float64 answer, where eager is off by far more
    assert judged is not None and judged.passed and judged.eager_multiple == 2.0
    assert judged.candidate_max_abs_err < 1e-6 < 1e-2 < judged.eager_max_abs_err
    assert "judged against float64 instead" in large.detail and "passes" in large.detail
    assert all(t.float64 is None for t in v.correctness.trials if t is not large)  # only where eager failed it


def test_a_wrong_or_tf32_candidate_still_fails_against_float64(verifier):
    wrong = run(verifier, "wrong_for_large_numpy.py", ref=SIN_OF_GEMM, second_shape=False)
    assert wrong.status is VerdictStatus.INCORRECT
    large = next(t for t in wrong.correctness.trials if t.name == "adversarial-large")
    assert not large.passed and large.float64 is not None and not large.float64.passed
    assert large.float64.candidate_max_abs_err > 10 * large.float64.eager_max_abs_err
    assert "judged against float64 too, and fails" in large.detail
    # One TF32 pass: inaccurate wherever eager is accurate, so no trial passes (issue 14: fp32 tolerance).
    tf32 = run(verifier, "tf32_gemm_numpy.py", ref=SIN_OF_GEMM, second_shape=False)
    assert tf32.status is VerdictStatus.INCORRECT and not any(t.passed for t in tf32.correctness.trials)
    random = [t for t in tf32.correctness.trials if t.kind == "random"]
    assert random and all(t.float64 is not None and not t.float64.passed for t in random)


def test_nan_must_land_where_the_reference_puts_it_whatever_float64_says(verifier):
    v = run(verifier, "nan_to_zero_closer_numpy.py", ref=SIN_OF_GEMM, second_shape=False)
    assert v.status is VerdictStatus.INCORRECT
    assert set(failed(v)) == {"adversarial-nan", "adversarial-inf"}, failed(v)
    nan = next(t for t in v.correctness.trials if t.name == "adversarial-nan")
    assert nan.float64 is None and "NaN in" in nan.detail  # never re-judged: placement is exact


def test_the_float64_judgement_keeps_to_the_memory_plan(verifier):
    import types

    from stitch_lsp.contract import memory_plan as mp
    from stitch_lsp.worker.footprint import task_sizes

    ref = types.ModuleType("ref")
    exec(SIN_OF_GEMM, ref.__dict__)
    sizes, _ = task_sizes(ref)
    small = 1 << 16  # the smallest comparison slices: what a budget of a few MiB gets
    cap = (mp.trials_need(sizes, small) + mp.rejudge_need(sizes, small)) // 2  # the trials fit, the judgement not
    assert mp.chunk_elements(cap) == small
    v = run(verifier, "closer_than_eager_numpy.py", ref=SIN_OF_GEMM, second_shape=False, memory_limit_gib=cap / mp.GiB)
    assert v.status is VerdictStatus.INCORRECT, v.summary  # judged against eager only, as before
    large = next(t for t in v.correctness.trials if t.name == "adversarial-large")
    assert not large.passed and not large.float64.passed
    assert "not judged against float64: judging a failed trial against float64 needs" in large.detail


SMALL_SIGNAL = (CORPUS / "ref_relu_scale.py").read_text().replace("torch.relu(x) * 2.0", "torch.relu(x) * 2e-7")
NOISE = (CORPUS / "ref_relu_scale.py").read_text().replace(
    "return torch.relu(x) * 2.0", "return (x - x.mean(dim=1, keepdim=True)).mean(dim=1)")
SMALL_HONEST = '''
import numpy as np
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        a = x.numpy()
        return torch.from_numpy((np.maximum(a, 0) * np.float32(2e-7)).astype(a.dtype))
'''


def small(verifier: Verifier, ref: str, candidate: str) -> Verdict:
    return verifier.verify(ref, Candidate(module_source=candidate),
                           VerifyOptions(device="cpu", timing=False, use_cache=False))


def test_small_outputs_that_carry_signal_are_verified_at_their_own_scale(verifier):
    # Every output is under the tolerance, yet the reference agrees with float64: zeros must fail.
    zeros = small(verifier, SMALL_SIGNAL, (CORPUS / "cheat_zeros.py").read_text())
    assert zeros.status is VerdictStatus.INCORRECT, zeros.summary
    honest = small(verifier, SMALL_SIGNAL, SMALL_HONEST)
    assert honest.status is VerdictStatus.CORRECT, honest.summary
    assert honest.correctness.atol < 1e-9
    assert any("compared at atol" in e for e in honest.events)


def test_outputs_that_are_rounding_noise_stay_unverifiable(verifier):
    v = small(verifier, NOISE, (CORPUS / "cheat_zeros.py").read_text().replace("zeros_like(x)", "zeros(x.shape[0])"))
    assert v.status is VerdictStatus.UNVERIFIABLE and "near zero" in v.summary


L2_NORM = '''
import torch
import torch.nn as nn

batch_size = 8
dim = 16384


class Model(nn.Module):
    def forward(self, x):
        return x / torch.norm(x, p=2, dim=1, keepdim=True)


def get_inputs():
    return [torch.rand(batch_size, dim)]


def get_init_inputs():
    return []
'''
L2_NORM_HONEST = '''
import numpy as np
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        a = x.float().numpy().astype(np.float64)
        out = a / np.sqrt((a * a).sum(axis=1, keepdims=True))
        return torch.from_numpy(out.astype(np.float32)).to(x.dtype)
'''


def test_small_bf16_outputs_that_carry_signal_are_verified_at_their_own_scale(verifier):
    # In bf16 every value of this L2 norm is under bf16's atol (max ~0.013 against 0.02), and the reference
    # agrees with float64 to bf16's own rounding, not to 1e-3 of its largest value: signal, so it is judged.
    from stitch_lsp.task.precision import cast_source

    ref = cast_source(L2_NORM, "bf16")  # as stitch bench --precision bf16 hands it over: inputs cast too
    opts = dict(device="cpu", timing=False, use_cache=False, precision="bf16", second_shape=False)
    honest = verifier.verify(ref, Candidate(module_source=L2_NORM_HONEST), VerifyOptions(**opts))
    assert honest.status is VerdictStatus.CORRECT, honest.summary
    assert any("compared at atol" in e for e in honest.events)
    zeros = L2_NORM_HONEST.replace("out = a / np.sqrt((a * a).sum(axis=1, keepdims=True))", "out = a * 0")
    cheat = verifier.verify(ref, Candidate(module_source=zeros), VerifyOptions(**opts))
    assert cheat.status is VerdictStatus.INCORRECT, cheat.summary


def test_the_second_shape_is_judged_against_float64_too_where_eager_fails_it(verifier):
    """sin(10000 * linear(x)): with any inputs, eager's float32 GEMM rounding shows in the output, at the second
    shape as at the first; a candidate computing in float64 is off eager there but right, and passes."""
    ref = SIN_OF_GEMM.replace("* 10.0", "* 10000.0")
    candidate = Candidate(module_source=(CORPUS / "closer_than_eager_numpy.py").read_text()
                          .replace("* 10.0", "* 10000.0"))
    v = verifier.verify(ref, candidate, VerifyOptions(device="cpu", timing=False, use_cache=False))
    assert v.status is VerdictStatus.CORRECT, v.summary
    odd = next(t for t in v.correctness.trials if t.name == "odd-shape")
    assert odd.passed and odd.mismatches > 0 and odd.float64 is not None and odd.float64.passed, odd.detail
    assert "judged against float64 instead" in odd.detail
    # A wrong answer (10% off, where eager's own error is about 1e-3) is still wrong against float64 there.
    wrong = candidate.module_source.replace("np.sin(y * 10000.0)", "1.1 * np.sin(y * 10000.0)")
    v = verifier.verify(ref, Candidate(module_source=wrong), VerifyOptions(device="cpu", timing=False, use_cache=False))
    assert v.status is VerdictStatus.INCORRECT
    odd = next(t for t in v.correctness.trials if t.name == "odd-shape")
    assert not odd.passed and "judged against float64 too, and fails" in odd.detail
