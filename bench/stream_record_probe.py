"""What the profiler records about streams, for the Verifier's stream check (GPU machine).

    python bench/stream_record_probe.py [--raw]

For a kernel on the caller's stream, one on an unjoined side stream, one joined back with
an event, and a PyTorch op: the stream check's answer and how long the profiled call took;
with ``--raw``, every record of the side-stream case (kind, stream, correlation ids). Then
the time per launch of a small kernel before and after profiling (does CUPTI linger?).
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from stitch_lsp.runtime.loader import load_kernel
from stitch_lsp.worker.stream_check import FORWARD_RANGE, MARKER_CYCLES, profile_call

SOURCE = r'''
extern "C" __global__ void relu_scale(const float* __restrict__ x, float* __restrict__ y, long long n) {
    long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        float v = x[i];
        y[i] = (v > 0.f || v != v) ? 2.f * v : 0.f;
    }
}
'''


def per_launch_us(kernel, x, y, n: int, launches: int = 2000) -> float:
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(launches):
        kernel(grid=(64,), block=(256,), args=[x, y, n])
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / launches * 1e6


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--raw", action="store_true")
    args = parser.parse_args()
    n = 1 << 20
    x = torch.randn(n, device="cuda")
    y = torch.empty_like(x)
    kernel = load_kernel(SOURCE, "relu_scale")
    side = torch.cuda.Stream()
    grid, block = ((n + 255) // 256,), (256,)
    before = statistics.median(per_launch_us(kernel, x, y, 4096) for _ in range(5))

    def unjoined() -> None:
        side.wait_stream(torch.cuda.current_stream())
        kernel(grid=grid, block=block, args=[x, y, n], stream=side)

    def joined() -> None:
        caller = torch.cuda.current_stream()
        side.wait_stream(caller)
        kernel(grid=grid, block=block, args=[x, y, n], stream=side)
        done = torch.cuda.Event()
        done.record(side)
        caller.wait_event(done)

    cases = {
        "caller stream": lambda: kernel(grid=grid, block=block, args=[x, y, n]),
        "side, unjoined": unjoined,
        "side, joined": joined,
        "torch.relu": lambda: torch.relu(x),
    }
    for name, fn in cases.items():
        for attempt in range(2):
            t0 = time.perf_counter()
            _, error, check = profile_call(fn)
            seconds = time.perf_counter() - t0
        print(f"{name:<16} {seconds * 1e3:8.1f} ms (2nd call)  {check.status}: {check.message}  error={error}")
        for k in check.kernels:
            print(f"    {k.name[:60]:<60} stream {k.stream} joined={k.joined} {k.duration_us:.1f} us")
    if args.raw:
        from torch.profiler import ProfilerActivity, profile, record_function

        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            torch.cuda._sleep(MARKER_CYCLES)
            with record_function(FORWARD_RANGE):
                unjoined()
            torch.cuda._sleep(MARKER_CYCLES)
            torch.cuda.synchronize()
        for e in prof.profiler.kineto_results.events():
            activity = getattr(e, "activity_type", lambda: "?")()
            print(f"  raw {str(e.device_type()):<18} {activity:<16} {e.name()[:48]:<48} res={e.device_resource_id():<8} "
                  f"corr={e.correlation_id():<6} linked={e.linked_correlation_id():<6} "
                  f"t={e.start_ns()}..{e.end_ns()}")
    after = statistics.median(per_launch_us(kernel, x, y, 4096) for _ in range(5))
    print(f"small-kernel launch+run: {before:.2f} us before profiling, {after:.2f} us after")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
