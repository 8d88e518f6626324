"""Comparisons, fingerprints and float64 errors slice by slice: the same answers as whole-tensor
arithmetic, with no full-size float64 copy of an output."""

from __future__ import annotations

import math

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from stitch_lsp.worker import inputs
from stitch_lsp.worker.verify.compare import compare, error_vs, fingerprint, peak_abs, same_fingerprint

SLICE = 1000


class _LargestFloat64(TorchDispatchMode):
    """Records the most elements of any float64 tensor made while active."""

    def __init__(self) -> None:
        super().__init__()
        self.largest = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, (tuple, list)) else [out]:
            if isinstance(t, torch.Tensor) and t.dtype == torch.float64:
                self.largest = max(self.largest, t.numel())
        return out


def pair(n: int = 10_007) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    ref = torch.randn(n, generator=g) * 3
    return ref, ref + torch.randn(n, generator=g) * 1e-6


def test_sliced_comparison_agrees_with_one_slice_and_makes_no_full_float64_copy():
    ref, out = pair()
    out[7777] += 1.0
    out[9000] = float("nan")
    with _LargestFloat64() as watch:
        sliced = compare(ref, out, chunk=SLICE)
    whole = compare(ref, out, chunk=ref.numel())
    assert watch.largest <= SLICE
    assert not sliced.passed and sliced.mismatches == whole.mismatches == 2
    assert sliced.max_abs == pytest.approx(whole.max_abs) and sliced.max_rel == pytest.approx(whole.max_rel)
    assert "first at (7777,)" in sliced.detail and "NaN in 1 places" in sliced.detail


def test_sliced_comparison_passes_close_outputs_and_places_the_first_miss_in_nd():
    ref, out = pair(4 * 2503)
    assert compare(ref.view(4, 2503), out.view(4, 2503), chunk=SLICE).passed
    out[2 * 2503 + 5] += 1.0
    result = compare(ref.view(4, 2503), out.view(4, 2503), chunk=SLICE)
    assert not result.passed and "first at (2, 5)" in result.detail


def test_fingerprints_see_one_changed_value_a_swap_and_nan_but_not_a_copy():
    ref, _ = pair()
    base = fingerprint(ref, SLICE)
    assert same_fingerprint(base, fingerprint(ref.clone(), SLICE))
    changed, swapped, nan = ref.clone(), ref.clone(), ref.clone()
    changed[5000] += 1e-3
    swapped[[10, 20]] = swapped[[20, 10]]
    nan[3] = float("nan")
    for other in (changed, swapped, nan):
        assert not same_fingerprint(base, fingerprint(other, SLICE))
    assert same_fingerprint(fingerprint(nan, SLICE), fingerprint(nan.clone(), SLICE))


def test_error_against_float64_and_peak_in_slices():
    ref64 = torch.linspace(-2, 2, 5001, dtype=torch.float64)
    out = ref64.float()
    out[100] += 0.5
    stats = error_vs(ref64, out, chunk=SLICE)
    assert stats is not None and stats.max_abs == pytest.approx(0.5, rel=1e-5)
    assert stats.count == 5001 and stats.rms_ref == pytest.approx(math.sqrt(float((ref64 ** 2).mean())))
    assert peak_abs([out, torch.tensor([float("inf")])], chunk=SLICE) == pytest.approx(2.0)


@pytest.mark.parametrize("case", inputs.ADVERSARIAL_CASES)
def test_adversarial_values_are_the_same_for_a_seed_and_planted_in_place(case):
    def draw() -> list[torch.Tensor]:
        return [torch.randn(3, 5003, generator=torch.Generator().manual_seed(1)), 7]

    a = inputs.adversarial(draw(), case, seed=11, chunk=SLICE)
    b = inputs.adversarial(draw(), case, seed=11, chunk=SLICE)
    assert a[1] == 7 and same_fingerprint(fingerprint(a[0]), fingerprint(b[0]))
    x, clean = a[0], draw()[0]
    if case == "nan":
        assert 0 < int(torch.isnan(x).sum()) < x.numel() * 0.03
    elif case == "inf":
        assert bool((x == math.inf).any()) and bool((x == -math.inf).any())
    elif case == "denormal":
        tiny = (x != 0) & (x.abs() < torch.finfo(torch.float32).tiny)
        assert x.numel() * 0.15 < int(tiny.sum()) < x.numel() * 0.35
    elif case == "signed-zero":
        assert int((x == 0).sum()) > x.numel() * 0.15 and bool(torch.signbit(x[x == 0]).any())
    else:
        assert torch.allclose(x, clean * 1e4)


def _judged(eager_err: torch.Tensor, cand_err: torch.Tensor):
    from stitch_lsp.worker.verify.compare import compare_tensor

    exact = torch.linspace(1.0, 2.0, eager_err.numel(), dtype=torch.float64)
    ref = (exact + eager_err).float()
    out = (exact + cand_err).float()
    return compare_tensor(ref, out, 1e-4, 1e-4, ref64=exact, eager_multiple=2.0)


def test_a_candidate_more_accurate_as_a_whole_passes_where_eager_happens_to_be_exact():
    n = 10_000
    eager_err = torch.full((n,), 4e-3, dtype=torch.float64)
    eager_err[::100] = 0.0  # eager exact at a few values by chance
    cand_err = torch.full((n,), 1e-4, dtype=torch.float64)
    cand_err[::100] = 1e-3  # the candidate off there, by less than eager's usual error
    c = _judged(eager_err, cand_err)
    assert c.passed and "as a whole as accurate as eager" in c.as_a_whole and c.mismatches == 0


def test_value_by_value_failures_stand_when_the_candidate_is_worse_as_a_whole():
    n = 10_000
    eager_err = torch.full((n,), 4e-4, dtype=torch.float64)
    eager_err[::100] = 0.0
    worse_max = torch.full((n,), 1e-5, dtype=torch.float64)
    worse_max[::100] = 5e-2  # off by far more than eager ever is
    assert not _judged(eager_err, worse_max).passed
    spiky = torch.full((n,), 1e-4, dtype=torch.float64)
    spiky[::100] = 5e-3  # eager: mostly close, a few values far off
    worse_mean = torch.full((n,), 1e-3, dtype=torch.float64)  # under eager's largest error, 7x its mean
    c = _judged(spiky, worse_mean)
    assert not c.passed and not c.as_a_whole
