"""Request kind ``gemm_tune``: time every candidate tile of the GEMM family's kernels on this GPU.

Compiling is most of a tuning run (a 3xTF32 kernel takes seconds), so every (kernel, tile) compiles at
once in a pool of processes that fill Triton's on-disk cache; this process then loads each binary from
that cache and times it: inputs drawn once (random, never zeros), L2 flushed before each launch, launches
queued behind a blocking kernel and timed by CUDA events (GPU time, not the host's launch cost), the median
of enough launches to cover about 50 ms. cuBLAS on the same GEMM(s) is timed the
same way, so the cache can record when the library alone was faster.
"""

from __future__ import annotations

import concurrent.futures as futures
import multiprocessing
import os
import statistics
import time
from typing import Any

from stitch_lsp.contract.gemm_tune import TuneCase, TuneReply, TuneRequest, TuneResult, tile_label
from stitch_lsp.serde import from_dict

FLUSH_BYTES = 64 << 20  # more than the H100's 50 MB of L2


def _compile(source: str, name: str, dtypes: list[str], grid: list[int], meta: dict[str, int]) -> tuple[float, str]:
    """In a compile process: (seconds, error). The binary lands in Triton's cache for the parent to load."""
    import torch
    import triton  # noqa: F401 - imported before the clock starts: the compile alone is timed

    from stitch_lsp.runtime.loader import load_triton

    start = time.perf_counter()
    try:
        kernel = load_triton(source, name)
        kernel.warmup(*[getattr(torch, d) for d in dtypes], grid=tuple(grid), **meta)
    except Exception as exc:  # noqa: BLE001 - a tile that does not compile is reported, not fatal
        return time.perf_counter() - start, f"{type(exc).__name__}: {str(exc)[:300]}"
    return time.perf_counter() - start, ""


def compile_all(cases: list[TuneCase], parallel: int) -> dict[tuple[str, str], tuple[float, str]]:
    jobs = [(case, t) for case in cases for t in case.tiles]
    if not jobs:
        return {}
    workers = max(1, min(len(jobs), parallel or min(16, os.cpu_count() or 1)))
    out: dict[tuple[str, str], tuple[float, str]] = {}
    context = multiprocessing.get_context("spawn")  # CUDA and fork do not mix
    with futures.ProcessPoolExecutor(max_workers=workers, mp_context=context) as pool:
        running = {
            pool.submit(_compile, case.source, case.name, [d for _, d in case.inputs + case.outputs], t.grid, t.meta):
                (case.key, tile_label(t.tile)) for case, t in jobs
        }
        for done in futures.as_completed(running):
            key = running[done]
            try:
                out[key] = done.result()
            except Exception as exc:  # noqa: BLE001 - a crashed compile process
                out[key] = (0.0, f"the compile process failed: {exc}")
    return out


def _tensor(shape: list[int], dtype: str, device: Any) -> Any:
    import torch

    dt = getattr(torch, dtype)
    if dt == torch.bool:
        return torch.rand(shape, device=device) > 0.5
    if not dt.is_floating_point:
        return torch.randint(0, 8, shape, device=device, dtype=dt)
    return torch.randn(shape, device=device, dtype=dt)


QUEUE = 8  # launches queued behind one blocking kernel
_blocker: Any = None


def time_call(fn, flush: Any, budget_ms: float = 50.0) -> float:
    """Median GPU µs of ``fn()`` on the current stream, L2 flushed before each call. The calls are queued
    behind a blocking kernel, as the Verifier times (``worker/timing``): a small GEMM runs in about the time
    a Triton launch takes on the host, and events around an unqueued launch would time the host."""
    import torch

    from stitch_lsp.worker.timing import Blocker

    global _blocker
    if _blocker is None:
        _blocker = Blocker()
    fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    flush.zero_()
    fn()
    host_ms = (time.perf_counter() - t0) * 1e3
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    _blocker.block(max(0.2, 3.0 * host_ms))
    start.record()
    fn()
    end.record()
    end.synchronize()
    estimate = max(start.elapsed_time(end), 1e-3)
    reps = int(min(48, max(8, budget_ms / estimate)))
    times: list[float] = []
    while len(times) < reps:
        n = min(QUEUE, reps - len(times))
        _blocker.block(max(0.2, 3.0 * host_ms * n))
        queued = []
        for _ in range(n):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            flush.zero_()
            a.record()
            fn()
            b.record()
            queued.append((a, b))
        torch.cuda.synchronize()
        times += [a.elapsed_time(b) * 1000.0 for a, b in queued]
    return statistics.median(times)


def _library(case: TuneCase, device: Any, flush: Any) -> float | None:
    import torch

    if not case.library:
        return None
    dt = getattr(torch, case.dtype)
    calls = []
    for g in case.library:
        a = torch.randn(g.m, g.k, device=device, dtype=dt)
        w = torch.randn((g.n, g.k) if g.b_trans else (g.k, g.n), device=device, dtype=dt)
        b = torch.randn(g.n, device=device, dtype=dt) if g.bias else None
        wt = w.t() if g.b_trans else w
        calls.append((a, wt, b))

    def run() -> None:
        for a, wt, b in calls:
            torch.addmm(b, a, wt) if b is not None else torch.mm(a, wt)

    return time_call(run, flush)


def tune(request: TuneRequest, progress=lambda stage, message="", percent=None: None) -> TuneReply:
    import torch

    from stitch_lsp.runtime.loader import load_triton

    started = time.perf_counter()
    if not torch.cuda.is_available():
        return TuneReply(ok=False, message="no CUDA GPU visible to the worker: nothing was tuned")
    device = torch.device("cuda", torch.cuda.current_device())
    # Fp32 GEMMs here are what the reference runs: full fp32 unless the case says otherwise.
    torch.backends.cuda.matmul.allow_tf32 = False
    progress("tuning", f"compiling {sum(len(c.tiles) for c in request.cases)} kernel tiles", 5)
    compiled = compile_all(request.cases, request.parallel)
    flush = torch.empty(FLUSH_BYTES // 4, device=device, dtype=torch.float32)
    results = []
    for i, case in enumerate(request.cases):
        progress("tuning", f"timing {case.name} ({i + 1} of {len(request.cases)})",
                 10 + int(85 * i / max(1, len(request.cases))))
        result = TuneResult(key=case.key)
        args = [_tensor(shape, dtype, device) for shape, dtype in case.inputs]
        outs = [torch.empty(shape, device=device, dtype=getattr(torch, dtype)) for shape, dtype in case.outputs]
        kernel = load_triton(case.source, case.name)
        for t in case.tiles:
            label = tile_label(t.tile)
            seconds, error = compiled.get((case.key, label), (0.0, ""))
            result.compile_s[label] = round(seconds, 3)
            if error:
                result.errors[label] = error
                continue
            if time.perf_counter() - started > request.budget_s:
                result.errors[label] = "not timed: the tuning run's time budget ran out"
                continue
            try:
                grid = tuple(t.grid)
                us = time_call(lambda: kernel.launch(grid, [*args, *outs], t.meta), flush)
            except Exception as exc:  # noqa: BLE001 - e.g. out of shared memory for this tile
                result.errors[label] = f"{type(exc).__name__}: {str(exc)[:300]}"
                continue
            result.timings_us[label] = round(us, 2)
            if result.best_us is None or us < result.best_us:
                result.best_us, result.best = round(us, 2), list(t.tile)
        result.library_us = _library(case, device, flush)
        if result.library_us is not None:
            result.library_us = round(result.library_us, 2)
        results.append(result)
    return TuneReply(ok=True, results=results, gpu=torch.cuda.get_device_name(device),
                     seconds=round(time.perf_counter() - started, 2))


def handle(payload: Any, ctx: Any) -> TuneReply:
    request = from_dict(payload, TuneRequest)
    return tune(request, ctx.progress if ctx is not None else (lambda *a, **k: None))
