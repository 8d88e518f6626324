"""Adversarial inputs that are all finite can make the reference overflow its dtype (fp16 ``q @ kᵀ`` of
large values is inf, NaN after the softmax). There the reference defines nothing: those output values are
left out, counted and said, and everything the reference does define is judged as always. NaN and Inf
planted in the inputs keep the strict rule: they must land where the reference puts them.

End to end on the CPU (the Verifier's test mode, numpy stand-ins for kernels), and the comparison itself.
"""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from stitch_lsp.pipeline import Candidate  # noqa: E402
from stitch_lsp.settings import Settings  # noqa: E402
from stitch_lsp.verdict import VerdictStatus  # noqa: E402
from stitch_lsp.verify.service import Verifier, VerifyOptions  # noqa: E402
from stitch_lsp.worker.verify.compare import compare  # noqa: E402

CORPUS = Path(__file__).resolve().parent / "corpus" / "cpu"


@pytest.fixture(scope="module")
def verifier(tmp_path_factory):
    v = Verifier(Settings(), tmp_path_factory.mktemp("verify"))
    yield v
    v.close()


def run(verifier, ref: str, candidate: str):
    return verifier.verify((CORPUS / ref).read_text(), Candidate(module_source=(CORPUS / candidate).read_text()),
                           VerifyOptions(device="cpu", timing=False, use_cache=False))


def trial(verdict, name):
    return next(t for t in verdict.correctness.trials if t.name == name)


def test_an_overflowing_reference_leaves_its_non_finite_values_out_and_says_how_many(verifier):
    v = run(verifier, "ref_power_ratio.py", "power_ratio_float64_numpy.py")
    assert v.status is VerdictStatus.CORRECT, (v.summary, [t.detail for t in v.correctness.failed_trials])
    large = trial(v, "adversarial-large")
    assert large.passed and large.left_out > 0
    assert f"{large.left_out} of 256 output values not judged: the reference is not finite there" in large.detail
    # NaN / Inf planted in the inputs: nothing is left out, placement is judged.
    assert trial(v, "adversarial-nan").left_out == 0 and trial(v, "adversarial-inf").left_out == 0


def test_a_wrong_finite_value_still_fails_where_the_reference_overflowed_elsewhere(verifier):
    v = run(verifier, "ref_power_ratio.py", "power_ratio_wrong_when_large_numpy.py")
    assert v.status is VerdictStatus.INCORRECT, v.summary
    large = trial(v, "adversarial-large")
    assert not large.passed and large.left_out > 0
    assert "values off" in large.detail and "judged against float64 too, and fails" in large.detail
    assert all(t.passed for t in v.correctness.trials if t.kind == "random")


def test_a_reference_that_overflows_nearly_everywhere_is_not_checked_rather_than_passed(verifier):
    v = run(verifier, "ref_power_30.py", "power_30_numpy.py")
    assert v.status is VerdictStatus.CORRECT, v.summary
    assert not any(t.name == "adversarial-large" for t in v.correctness.trials)
    (note,) = [n for n in v.correctness.not_checked if n.startswith("adversarial-large")]
    assert "overflows its dtype" in note and "too little is defined to judge" in note


def test_the_comparison_leaves_out_only_where_the_reference_is_not_finite():
    ref = torch.tensor([1.0, float("nan"), float("inf"), 2.0, 3.0])
    honest = torch.tensor([1.0, 0.5, 7.0, 2.0, 3.0])
    strict = compare(ref, honest)
    assert not strict.passed and strict.misplaced == 2 and strict.left_out == 0
    lenient = compare(ref, honest, undefined_where_not_finite=True)
    assert lenient.passed and lenient.left_out == 2 and lenient.numel == 5
    # Where the reference is finite: a wrong value, a NaN or an Inf still fails.
    for bad in (2.5, float("nan"), float("inf")):
        wrong = honest.clone()
        wrong[3] = bad
        c = compare(ref, wrong, undefined_where_not_finite=True)
        assert not c.passed and c.left_out == 2, bad
