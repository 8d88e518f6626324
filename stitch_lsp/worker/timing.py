"""Interleaved timing: eager, torch.compile and the candidate in one run.

Each sample: L2 flushed, device synchronised, CUDA events around one call on the
current stream, device synchronised again; the host clock spans the same call
from before the launch to after the device-wide synchronise. Inputs rotate
among several fresh sets; the order of contenders rotates every round.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

L2_FLUSH_BYTES = 256 * 1024 * 1024  # > 2x the L2 of any current GPU (H100: 50 MB)


@dataclass
class Samples:
    events_ms: list[float] = field(default_factory=list)
    host_ms: list[float] = field(default_factory=list)


def percentile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    k = (len(ordered) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def stats(values: list[float]) -> dict[str, float]:
    return {
        "median_ms": statistics.median(values) if values else 0.0,
        "p10_ms": percentile(values, 0.1),
        "p90_ms": percentile(values, 0.9),
        "min_ms": min(values) if values else 0.0,
        "samples": len(values),
    }


def run_interleaved(contenders: dict[str, Callable[[list[Any]], Any]], input_sets: list[list[Any]], *,
                    cuda: bool, budget_s: float, warmup: int = 3, min_rounds: int = 10,
                    max_rounds: int = 200) -> dict[str, Samples]:
    flush = torch.empty(L2_FLUSH_BYTES // 4, dtype=torch.float32, device="cuda") if cuda else None

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize()

    names = list(contenders)
    started = time.perf_counter()
    for _ in range(warmup):
        for i, name in enumerate(names):
            contenders[name](input_sets[i % len(input_sets)])
    sync()
    per_round = (time.perf_counter() - started) / max(1, warmup)
    rounds = int(max(min_rounds, min(max_rounds, budget_s / max(per_round * 1.5, 1e-6))))
    samples = {name: Samples() for name in names}
    for r in range(rounds):
        args = input_sets[r % len(input_sets)]
        order = names[r % len(names):] + names[: r % len(names)]
        for name in order:
            fn = contenders[name]
            if flush is not None:
                flush.zero_()
            sync()
            if cuda:
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                t0 = time.perf_counter()
                start.record()
                fn(args)
                end.record()
                torch.cuda.synchronize()
                t1 = time.perf_counter()
                samples[name].events_ms.append(start.elapsed_time(end))
            else:
                t0 = time.perf_counter()
                fn(args)
                t1 = time.perf_counter()
                samples[name].events_ms.append((t1 - t0) * 1e3)
            samples[name].host_ms.append((t1 - t0) * 1e3)
    return samples


def hidden_work(candidate: Samples, eager: Samples) -> tuple[bool, str]:
    """True when the host clock sees much more time than the events: work on another stream."""
    ev = statistics.median(candidate.events_ms)
    host = statistics.median(candidate.host_ms)
    eager_gap = statistics.median(eager.host_ms) - statistics.median(eager.events_ms)
    gap = host - ev
    if host > 2 * ev and gap > eager_gap + 0.05:
        return True, (f"host clock {host:.3f} ms vs CUDA events {ev:.3f} ms on the current stream "
                      f"(eager's own gap {eager_gap:.3f} ms): work runs where the events do not see it")
    return False, f"host clock {host:.3f} ms, events {ev:.3f} ms (eager gap {eager_gap:.3f} ms)"
