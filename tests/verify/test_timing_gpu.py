"""GPU time hides host cost: a contender with a large fixed host cost and a fast kernel is timed by its kernel."""

from __future__ import annotations

import statistics
import time

import pytest

torch = pytest.importorskip("torch")

from stitch_lsp.contract.intervals import median_interval, round_ratios  # noqa: E402

pytestmark = pytest.mark.gpu


def test_a_contender_with_a_large_host_cost_is_timed_by_its_kernel():
    from stitch_lsp.worker.timing import LAUNCH_QUEUED, run_interleaved

    x = torch.randn(1 << 22, device="cuda")  # 16 MB: a kernel of a few microseconds on any current GPU

    def plain(args):
        return args[0] * 2.0

    def slow_host(args):
        time.sleep(0.002)  # 2 ms of host work (argument checks, a Python wrapper) before the launch
        return args[0] * 2.0

    with torch.no_grad():
        run = run_interleaved({"eager": plain, "candidate": slow_host}, [[x]], cuda=True, budget_s=3.0,
                              pairs=[("eager", "candidate")])
    s = run.samples
    assert run.launch == LAUNCH_QUEUED and run.rounds >= 8
    gpu = median_interval(round_ratios(s["eager"].round_gpu_ms, s["candidate"].round_gpu_ms))
    # By GPU time the two are the same kernel: the 2 ms never reach the events.
    assert gpu is not None and 0.85 < gpu.value < 1.15, (gpu, run.stop_reason)
    assert statistics.median(s["candidate"].gpu_ms) < 0.5
    # By call latency (host included) the slow host shows, as it should in that figure.
    assert statistics.median(s["candidate"].latency_ms) > 2.0
    lat = median_interval(round_ratios(s["eager"].latency_ms, s["candidate"].latency_ms))
    assert lat is not None and lat.high < 0.5


def test_a_contender_that_synchronises_is_called_host_bound():
    from stitch_lsp.worker.timing import LAUNCH_HOST_BOUND, run_interleaved

    x = torch.randn(1 << 20, device="cuda")

    def syncs(args):
        y = args[0] * 2.0
        torch.cuda.synchronize()
        return y

    with torch.no_grad():
        run = run_interleaved({"eager": lambda a: a[0] * 2.0, "candidate": syncs}, [[x]], cuda=True, budget_s=1.0,
                              pairs=[("eager", "candidate")])
    assert run.launch == LAUNCH_HOST_BOUND and run.rounds >= 8
