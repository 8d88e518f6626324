"""Interleaved timing: eager, torch.compile and the candidate in one run, two measures.

**GPU time** (the headline). Each round starts with a blocking kernel (a spin of
fixed length, NVBench's method) that holds the stream while the host queues the
whole round: for each of a few calls, and for each contender in a rotated order,
the L2 flush (a 256 MB write), a start event, the call, an end event. When the spin
ends the GPU runs the queued work back to back, so the events see the contender's
device work and none of its host cost (Python dispatch, guards, argument packing),
as in a training loop. A round counts only if the host had queued all of it before
the spin ended (host enqueue time < the spin's measured length); otherwise the spin
is lengthened and the round run again. Inputs rotate among the sets.

**Call latency** (host included). After each round, each contender once more with
the device synchronised around the call, timed by the host clock (CUDA events span
the same call, for the hidden-work check).

Sampling stops when every speedup's 95 % interval is tight or at the time cap
(``stitch_lsp.contract.intervals.StopRule``). CUDA-graph replay is not used: it would
time a different program for contenders that synchronise, allocate or take guards
(torch.compile), and the blocking kernel hides host cost for all of them alike.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from stitch_lsp.contract.intervals import Decision, StopRule, round_ratios

L2_FLUSH_BYTES = 256 * 1024 * 1024  # > 2x the L2 of any current GPU (H100: 50 MB, H200: 60 MB)
ROUND_TARGET_MS = 8.0  # GPU work queued per round (calls x contenders), before the cap on calls
MAX_CALLS_PER_ROUND = 8  # a round's queue stays far below the driver's pending-launch limit
BLOCK_MIN_MS = 0.5
BLOCK_MAX_MS = 400.0
BLOCK_MARGIN = 1.6  # the spin lasts this many times the host's last enqueue time
MAX_RETRIES = 6  # rounds in a row run again with a longer spin before the run is called host-bound
MAX_RETRIES_TOTAL = 40
LAUNCH_QUEUED = "queued behind a blocking kernel"
LAUNCH_HOST_BOUND = "host-bound"  # the host could not queue a round ahead of the GPU (it synchronised)


@dataclass
class Samples:
    gpu_ms: list[float] = field(default_factory=list)  # every queued call's GPU time
    round_gpu_ms: list[float] = field(default_factory=list)  # per round: the median of its calls
    latency_ms: list[float] = field(default_factory=list)  # host clock around one synchronised call
    events_ms: list[float] = field(default_factory=list)  # CUDA events around that same call


@dataclass
class TimingRun:
    samples: dict[str, Samples]
    rounds: int = 0
    calls_per_round: int = 1
    converged: bool = False
    stop_reason: str = ""
    launch: str = LAUNCH_QUEUED
    retried_rounds: int = 0  # rounds run again because the host fell behind the spin
    failed_in_a_row: int = 0
    block_ms: float = 0.0
    seconds: float = 0.0


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


class Blocker:
    """``torch.cuda._sleep`` in milliseconds. It spins a number of SM cycles, and the SM clock moves (an idle
    H200 runs at 345 MHz, a busy one at 1980): every spin's measured length recalibrates the next."""

    def __init__(self) -> None:
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        cycles = 2_000_000
        a.record()
        torch.cuda._sleep(cycles)
        b.record()
        torch.cuda.synchronize()
        self.cycles_per_ms = cycles / max(a.elapsed_time(b), 1e-3)
        self.last_cycles = 0

    def block(self, ms: float) -> None:
        self.last_cycles = max(1, int(ms * self.cycles_per_ms))
        torch.cuda._sleep(self.last_cycles)

    def measured(self, ms: float) -> None:
        if ms > 0.05 and self.last_cycles:
            self.cycles_per_ms = self.last_cycles / ms


def run_interleaved(contenders: dict[str, Callable[[list[Any]], Any]], input_sets: list[list[Any]], *,
                    cuda: bool, budget_s: float, pairs: list[tuple[str, str]] | None = None,
                    rule: StopRule | None = None, warmup: int = 3) -> TimingRun:
    """Time every contender; ``pairs`` (baseline, candidate) are the ratios whose intervals decide when to stop."""
    names = list(contenders)
    rule = rule or StopRule(budget_s=budget_s)
    pairs = [p for p in (pairs or []) if p[0] in contenders and p[1] in contenders]
    flush = torch.empty(L2_FLUSH_BYTES // 4, dtype=torch.float32, device="cuda") if cuda else None

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize()

    for k in range(warmup):
        for i, name in enumerate(names):
            contenders[name](input_sets[(k + i) % len(input_sets)])
    sync()
    run = TimingRun(samples={name: Samples() for name in names})
    # One synchronised call each: the latency figure's first sample, and the size of a round.
    for name in names:
        _latency_call(contenders[name], input_sets[0], run.samples[name], flush, cuda)
    blocker = Blocker() if cuda else None
    if cuda:
        flush_ms = _flush_ms(flush)
        per_call = sum(min(statistics.median(run.samples[n].events_ms), statistics.median(run.samples[n].latency_ms))
                       + flush_ms for n in names)
        run.calls_per_round = max(1, min(MAX_CALLS_PER_ROUND, int(ROUND_TARGET_MS / max(per_call, 1e-3))))
        host = sum(statistics.median(run.samples[n].latency_ms) for n in names) * run.calls_per_round
        run.block_ms = min(BLOCK_MAX_MS, max(BLOCK_MIN_MS, BLOCK_MARGIN * host))
    started = time.perf_counter()
    r = 0
    while True:
        order = names[r % len(names):] + names[: r % len(names)]
        if cuda:
            accepted = _gpu_round(contenders, order, input_sets, r, run, flush, blocker)
            if not accepted:
                continue
        else:
            _host_round(contenders, order, input_sets, r, run)
        for name in order:
            _latency_call(contenders[name], input_sets[r % len(input_sets)], run.samples[name], flush, cuda)
        r += 1
        run.rounds = r
        ratios = {f"{b}/{c}": round_ratios(run.samples[b].round_gpu_ms, run.samples[c].round_gpu_ms)
                  for b, c in pairs}
        decision: Decision = rule.decide(ratios, r, time.perf_counter() - started)
        if decision.stop:
            run.converged, run.stop_reason = decision.converged, decision.reason
            break
    run.seconds = time.perf_counter() - started
    return run


def _flush_ms(flush: Any) -> float:
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    flush.zero_()
    b.record()
    torch.cuda.synchronize()
    return a.elapsed_time(b)


def _gpu_round(contenders: dict[str, Callable], order: list[str], input_sets: list[list[Any]], r: int,
               run: TimingRun, flush: Any, blocker: Blocker) -> bool:
    """One round queued behind the spin; False (and a longer spin) when the host fell behind it."""
    torch.cuda.synchronize()
    events: dict[str, list[tuple[Any, Any]]] = {name: [] for name in order}
    spin_a, spin_b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    t0 = time.perf_counter()
    spin_a.record()
    blocker.block(run.block_ms)
    spin_b.record()
    for i in range(run.calls_per_round):
        args = input_sets[(r * run.calls_per_round + i) % len(input_sets)]
        for name in order:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            flush.zero_()
            start.record()
            contenders[name](args)
            end.record()
            events[name].append((start, end))
    host_ms = (time.perf_counter() - t0) * 1e3
    torch.cuda.synchronize()
    spin_ms = spin_a.elapsed_time(spin_b)
    blocker.measured(spin_ms)
    if run.launch == LAUNCH_HOST_BOUND:
        pass
    elif host_ms >= spin_ms:
        # The GPU may have waited for the host inside a contender's events: not a GPU-time sample.
        run.retried_rounds += 1
        run.failed_in_a_row += 1
        if (run.block_ms < BLOCK_MAX_MS and run.failed_in_a_row <= MAX_RETRIES
                and run.retried_rounds <= MAX_RETRIES_TOTAL):
            run.block_ms = min(BLOCK_MAX_MS, max(2 * run.block_ms, BLOCK_MARGIN * host_ms))
            return False
        # A contender that waits for the device (a sync, .item()) cannot be queued ahead: spinning longer
        # only costs time. Its GPU time then includes the waits, and the verdict says so.
        run.launch = LAUNCH_HOST_BOUND
        run.block_ms = BLOCK_MIN_MS
    else:
        run.failed_in_a_row = 0
        run.block_ms = min(BLOCK_MAX_MS, max(BLOCK_MIN_MS, BLOCK_MARGIN * host_ms, 0.8 * run.block_ms))
    for name in order:
        times = [s.elapsed_time(e) for s, e in events[name]]
        run.samples[name].gpu_ms.extend(times)
        run.samples[name].round_gpu_ms.append(statistics.median(times))
    return True


def _host_round(contenders: dict[str, Callable], order: list[str], input_sets: list[list[Any]], r: int,
                run: TimingRun) -> None:
    """CPU test mode: the host clock around each call."""
    for name in order:
        t0 = time.perf_counter()
        contenders[name](input_sets[r % len(input_sets)])
        ms = (time.perf_counter() - t0) * 1e3
        run.samples[name].gpu_ms.append(ms)
        run.samples[name].round_gpu_ms.append(ms)


def _latency_call(fn: Callable, args: list[Any], samples: Samples, flush: Any, cuda: bool) -> None:
    if not cuda:
        t0 = time.perf_counter()
        fn(args)
        ms = (time.perf_counter() - t0) * 1e3
        samples.latency_ms.append(ms)
        samples.events_ms.append(ms)
        return
    flush.zero_()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    t0 = time.perf_counter()
    start.record()
    fn(args)
    end.record()
    torch.cuda.synchronize()
    samples.latency_ms.append((time.perf_counter() - t0) * 1e3)
    samples.events_ms.append(start.elapsed_time(end))


def hidden_work(candidate: Samples, eager: Samples) -> tuple[bool, str]:
    """True when the host clock sees much more time than the events: work on another stream."""
    ev = statistics.median(candidate.events_ms)
    host = statistics.median(candidate.latency_ms)
    eager_gap = statistics.median(eager.latency_ms) - statistics.median(eager.events_ms)
    gap = host - ev
    if host > 2 * ev and gap > eager_gap + 0.05:
        return True, (f"host clock {host:.3f} ms vs CUDA events {ev:.3f} ms on the current stream "
                      f"(eager's own gap {eager_gap:.3f} ms): work runs where the events do not see it")
    return False, f"host clock {host:.3f} ms, events {ev:.3f} ms (eager gap {eager_gap:.3f} ms)"
