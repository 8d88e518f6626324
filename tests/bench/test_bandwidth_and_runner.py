"""The copy-bandwidth worker request and the real backend's wiring to the Verifier."""

from __future__ import annotations

import pytest

from stitch_lsp.benchsuite import gpus, runner
from stitch_lsp.contract.copy_bandwidth import CopyBandwidthReply, CopyBandwidthRequest
from stitch_lsp.cancellation import CancelToken
from stitch_lsp.settings import Settings
from stitch_lsp.worker.handlers import HANDLERS


def test_the_request_is_registered_with_the_worker():
    assert HANDLERS["copy_bandwidth"] == "stitch_lsp.worker.copy_bandwidth_handler"


def test_without_a_gpu_the_worker_says_why(tmp_path):
    from stitch_lsp.verify.worker_pool import WorkerPool

    pool = WorkerPool(Settings(), tmp_path)
    try:
        info = gpus.measure_gpu(pool, "0", CancelToken(), timeout_s=120)
    finally:
        pool.close()
    assert info.copy_bandwidth_gbs is None
    assert "not measured" in info.message and "no CUDA device" in info.message


@pytest.mark.gpu
def test_copy_bandwidth_on_a_gpu(tmp_path):
    from stitch_lsp.verify.worker_pool import WorkerPool

    pool = WorkerPool(Settings(), tmp_path)
    try:
        reply = pool.call("copy_bandwidth", CopyBandwidthRequest(nbytes=1 << 28, iterations=10), CopyBandwidthReply,
                          timeout_s=120)
    finally:
        pool.close()
    assert 200 < reply.gbs_median <= reply.gbs_best < 20_000  # GB/s, bytes read + written
    assert reply.device is not None and reply.device.name


def test_options_verifier_turns_profiling_on_for_every_job():
    from stitch_lsp.contract.verify import VerifyOptions

    seen = []

    class Inner:
        pool = "the pool"

        def verify(self, source, candidate, options, **kwargs):
            seen.append((options, kwargs))
            return "verdict"

    wrapped = runner.OptionsVerifier(Inner(), profile="all", sanitize=False)
    assert wrapped.verify("src", "cand", VerifyOptions(trials=7), cancel="c") == "verdict"
    assert wrapped.verify("src", "cand") == "verdict"
    assert seen[0][0].profile is True and seen[0][0].trials == 7 and seen[0][1] == {"cancel": "c"}
    assert seen[1][0].profile is True
    assert wrapped.pool == "the pool"  # fuse_task traces through the Verifier's pool
    assert getattr(wrapped, "device", None) is None


def _verdict(status="correct", eager=2.0, compile_=1.3, cand_ms=0.1):
    from stitch_lsp.verdict import Timing, TimingStats, Verdict, VerdictStatus

    return Verdict(status=VerdictStatus(status), summary="",
                   timing=Timing(status="measured", speedup_vs_eager=eager, speedup_vs_compile=compile_,
                                 candidate=TimingStats(median_ms=cand_ms)))


def test_goals_that_trigger_a_profile():
    from stitch_lsp.benchsuite.tasks import BenchTask

    mem = BenchTask(name="pw", path="pw.py", expected_bound="memory", min_bytes=270_000_000)
    assert not runner.misses_goal(_verdict(cand_ms=0.1), mem, 3000.0)  # 2700 GB/s = 90%
    assert runner.misses_goal(_verdict(cand_ms=0.2), mem, 3000.0)  # 1350 GB/s
    assert runner.misses_goal(_verdict(eager=1.2), mem, 3000.0)
    assert runner.misses_goal(_verdict(compile_=1.05), mem, 3000.0)
    assert runner.misses_goal(_verdict(compile_=None), None, None)
    assert not runner.misses_goal(_verdict(status="incorrect", eager=0.5), mem, 3000.0)
    assert not runner.misses_goal(_verdict(cand_ms=0.2), mem, None)  # no bandwidth: speedups only


def test_misses_mode_profiles_only_the_misses(monkeypatch):
    calls = []

    class Inner:
        def __init__(self, verdict):
            self.verdict = verdict

        def verify(self, source, candidate, options, **kwargs):
            calls.append(("verify", options.profile))
            return self.verdict

    def fake_profile(self, source, candidate, options, cancel):
        calls.append(("profile", cancel))
        return "the profile"

    monkeypatch.setattr(runner.OptionsVerifier, "_profile", fake_profile)
    good = runner.OptionsVerifier(Inner(_verdict()), profile="misses")
    assert good.verify("s", "c", cancel="tok").profile.status == "skipped"
    slow = runner.OptionsVerifier(Inner(_verdict(eager=1.1)), profile="misses")
    assert slow.verify("s", "c", cancel="tok").profile == "the profile"
    assert calls == [("verify", False), ("verify", False), ("profile", "tok")]
    # A miss behind a convolution or GEMM is the library's: not worth half a minute of Nsight Compute.
    from stitch_lsp.pipeline import Candidate

    conv = Candidate(module_source="", library_calls=["aten.convolution.default (cuDNN through torch)"])
    verdict = runner.OptionsVerifier(Inner(_verdict(eager=1.1)), profile="misses").verify("s", conv, cancel="tok")
    assert verdict.profile.status == "skipped" and "library call dominates" in verdict.profile.message
    # It says how much of the candidate's GPU time the library takes, and the convolution's layout and why.
    from stitch_lsp.verdict import StreamCheck, StreamKernel

    heavy = _verdict(eager=1.1)
    heavy.streams = StreamCheck(status="checked", kernels=[
        StreamKernel("sm90_xmma_fprop_implicit_gemm_f32f32_tf32f32_f32_nchwkcrs_nchw_cudnn", 7, 750.0),
        StreamKernel("stitch_fused_0", 7, 200.0), StreamKernel("void at::native::elementwise_kernel<>", 7, 50.0)])
    conv.notes = ["convolution: convolution in NCHW: it feeds a row reduction kernel, which reads its input as NCHW",
                  "stitch_fused_0: row_reduction, ..."]
    message = runner.OptionsVerifier(Inner(heavy), profile="misses").verify("s", conv).profile.message
    assert "cuDNN / cuBLAS kernels 75% of its GPU time, the kernels written here 20%" in message, message
    assert "convolution in NCHW: it feeds a row reduction kernel" in message, message
    pool = Candidate(module_source="", library_calls=["aten.avg_pool2d.default (pooling)"])
    assert runner.OptionsVerifier(Inner(_verdict(eager=1.1)), profile="misses").verify("s", pool).profile == \
        "the profile"
    runner.configure(profile=False)
    assert runner._state.profile == "none"
    with pytest.raises(ValueError):
        runner.configure(profile="sometimes")
    runner.configure(profile="all")
