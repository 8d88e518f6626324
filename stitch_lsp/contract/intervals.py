"""Confidence intervals for median speedups, and the rule that stops sampling (part of the
worker contract: the worker samples until the rule says stop, and every renderer reads its intervals).

Pure arithmetic (no torch): the worker's timing loop asks ``StopRule`` after every
round, and the renderers read the intervals it produced.

A speedup sample is one round's ratio: the baseline's median GPU time in that round
over the candidate's, from calls issued in the same round (interleaved, same inputs,
same clocks). Rounds are the independent units. The interval for the median of those
ratios is distribution-free: the order statistics whose ranks a Binomial(n, 1/2)
brackets with the wanted probability (no normality assumed; timing noise has long
right tails). It needs at least 6 rounds for 95 %.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Mapping, Sequence

CONFIDENCE = 0.95
# Sampling stops once every ratio's interval is this tight (half-width / median).
TARGET_REL_HALF_WIDTH = 0.015


@dataclass(frozen=True)
class Interval:
    value: float  # the median
    low: float
    high: float
    n: int

    @property
    def half_width(self) -> float:
        """The larger distance from the median to an end (the interval need not be symmetric)."""
        return max(self.high - self.value, self.value - self.low)

    @property
    def rel_half_width(self) -> float:
        return (self.high - self.low) / 2.0 / self.value if self.value else math.inf

    def contains(self, x: float) -> bool:
        return self.low <= x <= self.high


def _binom_cdf_half(n: int, k: int) -> float:
    """P(Binomial(n, 1/2) <= k)."""
    if k < 0:
        return 0.0
    if k >= n:
        return 1.0
    return sum(math.comb(n, i) for i in range(k + 1)) / 2 ** n


def median_ranks(n: int, confidence: float = CONFIDENCE) -> tuple[int, int] | None:
    """0-based ranks (lo, hi) of the sorted sample whose span covers the median with at least
    ``confidence``; None when n is too small for any such pair."""
    alpha = 1.0 - confidence
    # The largest j with P(B <= j - 1) <= alpha / 2: then [x_(j), x_(n-j+1)] (1-based) covers.
    j = 0
    while _binom_cdf_half(n, j) <= alpha / 2:
        j += 1
    if j == 0:
        return None
    lo, hi = j - 1, n - j
    return (lo, hi) if lo <= hi else None


def median_interval(values: Sequence[float], confidence: float = CONFIDENCE) -> Interval | None:
    """The sample median and its distribution-free confidence interval; None below 6 values (95 %)."""
    data = sorted(v for v in values if math.isfinite(v))
    ranks = median_ranks(len(data), confidence)
    if ranks is None:
        return None
    lo, hi = ranks
    return Interval(value=statistics.median(data), low=data[lo], high=data[hi], n=len(data))


def round_ratios(baseline: Sequence[float], candidate: Sequence[float]) -> list[float]:
    """One speedup per round: the baseline's time over the candidate's, rounds paired by position."""
    return [b / c for b, c in zip(baseline, candidate) if c > 0 and b > 0]


@dataclass(frozen=True)
class Decision:
    stop: bool
    converged: bool
    reason: str


@dataclass(frozen=True)
class StopRule:
    """Sample until every ratio's interval is tight, or the time cap, or the round cap."""

    target: float = TARGET_REL_HALF_WIDTH
    budget_s: float = 1.0
    min_rounds: int = 8
    max_rounds: int = 2000
    confidence: float = CONFIDENCE

    def tight(self, ratios: Sequence[float]) -> bool:
        ci = median_interval(ratios, self.confidence)
        return ci is not None and ci.rel_half_width < self.target

    def decide(self, ratios: Mapping[str, Sequence[float]], rounds: int, elapsed_s: float) -> Decision:
        all_tight = bool(ratios) and all(self.tight(r) for r in ratios.values())
        if rounds >= self.min_rounds and all_tight:
            return Decision(True, True, f"every ratio's {self.confidence:.0%} interval within "
                                        f"±{100 * self.target:g} % after {rounds} rounds")
        if rounds >= self.max_rounds:
            return Decision(True, all_tight, f"round cap ({self.max_rounds}) reached")
        if elapsed_s >= self.budget_s and rounds >= self.min_rounds:
            return Decision(True, all_tight, f"time cap ({self.budget_s:g} s) reached after {rounds} rounds")
        return Decision(False, False, "")
