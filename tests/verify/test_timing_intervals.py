"""The interval arithmetic and the stopping rule of the timing, on synthetic samples (no GPU).

The coverage check is the test that matters: over many synthetic runs from a known
distribution, the 95 % interval must hold the true median about 95 % of the time. Wrong
formulas (too narrow, too wide, an off-by-one rank) are run through the same check and
must fail it, so the check itself can fail.
"""

from __future__ import annotations

import math
import random
import statistics
from typing import Callable, Sequence

import pytest

from stitch_lsp.contract import intervals
from stitch_lsp.contract.intervals import Interval, StopRule, median_interval, median_ranks, round_ratios

TRUE_MEDIAN = 1.8


def lognormal_ratios(rng: random.Random, n: int, sigma: float) -> list[float]:
    """Ratios whose median is TRUE_MEDIAN, with a long right tail (as timing noise has)."""
    # Exp(1) has median ln 2, so sigma * (E - ln 2) has median 0 and a long right tail.
    return [TRUE_MEDIAN * math.exp(sigma * (rng.expovariate(1.0) - math.log(2))) for _ in range(n)]


def coverage(ci: Callable[[Sequence[float]], Interval | None], *, n: int, reps: int = 1500, seed: int = 7) -> float:
    rng = random.Random(seed)
    hits = 0
    for _ in range(reps):
        interval = ci(lognormal_ratios(rng, n, 0.05))
        hits += interval is not None and interval.low <= TRUE_MEDIAN <= interval.high
    return hits / reps


def coverage_ok(ci: Callable[[Sequence[float]], Interval | None]) -> bool:
    """About 95 % at several sample sizes (the order-statistic interval is conservative: 95-99 %)."""
    return all(0.93 <= coverage(ci, n=n) <= 0.99 for n in (12, 30, 80))


def test_the_median_interval_covers_the_true_median_about_95_percent_of_the_time():
    assert coverage_ok(median_interval)


def _normal_with_n(values: Sequence[float]) -> Interval | None:
    # Mutant: standard error divided by n instead of sqrt(n): far too narrow.
    data = sorted(values)
    med, sd = statistics.median(data), statistics.stdev(data)
    half = 1.96 * sd / len(data)
    return Interval(med, med - half, med + half, len(data))


def _ranks_off_by_two(values: Sequence[float]) -> Interval | None:
    # Mutant: the order statistics two ranks closer to the median than the binomial allows.
    data = sorted(values)
    lo, hi = median_ranks(len(data))
    return Interval(statistics.median(data), data[lo + 2], data[hi - 2], len(data))


def _min_max(values: Sequence[float]) -> Interval | None:
    # Mutant: the whole range: covers always, says nothing (too wide).
    return Interval(statistics.median(values), min(values), max(values), len(values))


def _half_confidence(values: Sequence[float]) -> Interval | None:
    # Mutant: the confidence level dropped (a 50 % interval reported as a 95 % one).
    return median_interval(values, confidence=0.5)


@pytest.mark.parametrize("mutant", [_normal_with_n, _ranks_off_by_two, _min_max, _half_confidence])
def test_a_wrong_interval_formula_fails_the_coverage_check(mutant):
    assert not coverage_ok(mutant)


def test_ranks_match_the_binomial_tables():
    # Distribution-free 95 % intervals for the median (Conover's table): 1-based ranks (j, n - j + 1).
    assert median_ranks(5) is None  # even min..max covers only 93.75 %
    assert median_ranks(6) == (0, 5)
    assert median_ranks(10) == (1, 8)
    assert median_ranks(20) == (5, 14)
    assert median_ranks(100) == (39, 60)


def test_interval_arithmetic():
    ci = median_interval([1.0, 1.1, 0.9, 1.05, 0.95, 1.02, 0.98, 1.01, 0.99, 1.0])
    assert ci is not None and ci.value == pytest.approx(1.0) and ci.low == 0.95 and ci.high == 1.05
    assert ci.rel_half_width == pytest.approx(0.05)
    assert ci.half_width == pytest.approx(0.05) and ci.contains(1.0)
    assert median_interval([1.0, 2.0, float("nan")]) is None  # too few finite values
    assert round_ratios([2.0, 3.0, 1.0], [1.0, 0.0, 2.0]) == [2.0, 0.5]  # a zero time is no ratio


def test_sampling_stops_as_soon_as_every_ratio_is_tight():
    rule = StopRule(budget_s=10.0, min_rounds=8)
    rng = random.Random(1)
    eager: list[float] = []
    compiled: list[float] = []
    for rounds in range(1, 500):
        eager.append(1.8 * (1 + rng.gauss(0, 0.01)))
        compiled.append(0.4 * (1 + rng.gauss(0, 0.01)))
        decision = rule.decide({"eager": eager, "compiled": compiled}, rounds, elapsed_s=0.01 * rounds)
        tight = all(median_interval(r).rel_half_width < 0.015 for r in (eager, compiled) if len(r) >= 6) \
            and rounds >= 6
        if decision.stop:
            break
        assert not (tight and rounds >= 8), f"round {rounds}: every interval was tight but sampling went on"
    assert decision.converged and decision.stop
    assert rounds < 40  # 1 % noise converges in a few dozen rounds
    for r in (eager, compiled):
        assert median_interval(r).rel_half_width < 0.015
    assert "within ±1.5 %" in decision.reason


def test_one_noisy_ratio_keeps_sampling_until_the_time_cap():
    rule = StopRule(budget_s=1.0, min_rounds=8)
    rng = random.Random(2)
    steady = [1.5] * 8
    noisy = [rng.uniform(0.5, 1.5) for _ in range(8)]
    assert not rule.decide({"a": steady, "b": noisy}, 8, elapsed_s=0.5).stop
    decision = rule.decide({"a": steady, "b": noisy}, 8, elapsed_s=1.0)
    assert decision.stop and not decision.converged and "time cap" in decision.reason


def test_no_stop_before_the_minimum_rounds_even_when_tight():
    rule = StopRule(budget_s=1.0, min_rounds=8)
    assert not rule.decide({"a": [2.0] * 7}, 7, elapsed_s=5.0).stop
    assert rule.decide({"a": [2.0] * 8}, 8, elapsed_s=0.0).converged


def test_round_cap():
    rule = StopRule(budget_s=100.0, min_rounds=8, max_rounds=50)
    decision = rule.decide({"a": [1.0, 3.0] * 25}, 50, elapsed_s=1.0)
    assert decision.stop and not decision.converged and "round cap" in decision.reason


def test_the_default_target_is_the_issue_s():
    assert intervals.TARGET_REL_HALF_WIDTH == 0.015 and intervals.CONFIDENCE == 0.95
