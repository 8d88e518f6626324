"""The Verifier at KernelBench sizes, on a real GPU: the memory plan, every stream seen, accuracy.

The tasks under ``corpus/gpu/scale`` are level-1 shaped (4096 x 393216 float32: 6 GiB in,
6 GiB out). Run on the GPU machine: ``python -m pytest tests/verify/test_gpu_scale.py -m gpu -v -s``
(``-k "not gib"`` leaves out the 6 GiB tasks, a minute or more of GPU time).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from stitch_lsp.pipeline import Candidate
from stitch_lsp.verdict import Verdict, VerdictStatus
from stitch_lsp.verify.format import accuracy_lines, memory_lines, stream_lines
from stitch_lsp.verify.service import Verifier, VerifyOptions

pytestmark = pytest.mark.gpu

CORPUS = Path(__file__).resolve().parent / "corpus" / "gpu"
SCALE = CORPUS / "scale"
GiB = 1 << 30


@pytest.fixture(scope="module")
def verifier(gpu_verifier):
    return gpu_verifier


def run(verifier: Verifier, ref: Path, cand: Path, **opts) -> Verdict:
    opts.setdefault("use_cache", False)
    verdict = verifier.verify(ref.read_text(), Candidate(module_source=cand.read_text(), coder="user"),
                              VerifyOptions(**opts))
    print(f"\n{ref.name} + {cand.name}: {verdict.status.value}: {verdict.summary}  ({verdict.seconds:.1f} s)")
    for line in memory_lines(verdict.memory) + accuracy_lines(verdict.accuracy) + stream_lines(verdict.streams):
        print("  " + line.strip())
    for f in verdict.hack_flags:
        print(f"   flag {f.code} ({'dynamic' if f.dynamic else 'static'}): {f.message}")
    for t in verdict.correctness.trials:
        if not t.passed:
            print(f"   failed {t.name}: {t.detail[:200]}")
    if verdict.timing.status == "measured":
        t = verdict.timing
        print(f"   timing: eager {t.eager.median_ms:.3f} ms, compile "
              f"{t.compiled.median_ms if t.compiled else float('nan'):.3f} ms, candidate {t.candidate.median_ms:.3f} ms")
    for e in verdict.events[-4:]:
        print("   event:", e[:200])
    return verdict


def dynamic(verdict: Verdict, code: str) -> bool:
    return any(f.code == code and f.dynamic for f in verdict.hack_flags)


# ------------------------------------------------------------------ streams, small


def test_private_stream_cheat_is_flagged_at_a_small_size(verifier):
    # The kernel takes microseconds: it is done long before anything on the caller's stream
    # looks at the output, so only the stream record can tell.
    v = run(verifier, CORPUS / "ref_relu_scale.py", CORPUS / "cheat_private_stream.py", timing=False)
    assert v.status is VerdictStatus.HACKING, v.summary
    assert dynamic(v, "HACK004")
    assert v.streams.status == "checked" and v.streams.unjoined
    assert {k.name for k in v.streams.unjoined} == {"relu_scale"}


def test_stream_made_in_forward_is_flagged_by_the_stream_record_too(verifier):
    v = run(verifier, CORPUS / "ref_relu_scale.py", CORPUS / "cheat_side_stream.py", timing=False)
    assert v.status is VerdictStatus.HACKING
    assert v.streams.status == "checked" and v.streams.unjoined


def test_honest_two_streams_pass_and_their_time_covers_every_kernel(verifier):
    v = run(verifier, CORPUS / "ref_relu_scale.py", CORPUS / "honest_two_streams.py")
    assert v.status is VerdictStatus.CORRECT, (v.summary, v.hack_flags)
    assert not v.hack_flags
    assert v.streams.status == "checked" and len(v.streams.streams) == 2 and not v.streams.unjoined
    assert v.timing.status == "measured" and v.timing.host_clock_ok
    # The GPU time covers the side stream's kernel too: at least the kernels' own durations, run one
    # after the other as the join orders them. (The profiler's span_us is host-side, launch gaps
    # included: GPU time rightly leaves those out.)
    kernels_us = sum(k.duration_us for k in v.streams.kernels)
    assert v.timing.candidate.median_ms * 1e3 >= 0.9 * kernels_us, (v.timing.candidate, v.streams.kernels)


# ------------------------------------------------------------------ too large


def test_too_large_task_ends_with_its_own_status_before_anything_runs(verifier):
    v = run(verifier, SCALE / "ref_too_large.py", SCALE / "relu_kernel.py")
    assert v.status is VerdictStatus.TOO_LARGE, v.summary
    assert "GiB" in v.summary and "free" in v.summary
    assert v.memory.status == "too_large" and v.memory.input_bytes == 96 * GiB
    assert not v.correctness.trials and v.compile is None  # nothing was built or run
    assert v.seconds < 60
    ok = run(verifier, CORPUS / "ref_relu_scale.py", CORPUS / "honest_relu_scale.py", timing=False)
    assert ok.status is VerdictStatus.CORRECT


# ------------------------------------------------------------------ 6 GiB tasks


@pytest.mark.parametrize("ref,cand", [
    ("ref_relu_6gib.py", "relu_kernel.py"),
    ("ref_softmax_6gib.py", "softmax_rows.py"),
    ("ref_layernorm_6gib.py", "layernorm_rows.py"),
])
def test_6gib_task_verifies_with_its_peak_memory(verifier, ref, cand):
    v = run(verifier, SCALE / ref, SCALE / cand, timeout_s=540)
    assert v.status is VerdictStatus.CORRECT, v.summary
    m = v.memory
    assert m.status == "planned" and m.traced and m.input_bytes == 6 * GiB and m.output_bytes >= 6 * GiB
    # Both sides' outputs and one input set are alive at the trials' peak (poisoning fills the
    # allocator's free cached blocks too, so live tensors count a little more): inside the plan's
    # budget. What the allocator held from the GPU, cache included, stayed inside what was free.
    assert 18 * GiB <= m.peak_allocated_bytes <= m.budget_bytes
    for p in m.phases:
        assert p.peak_bytes is not None and p.peak_bytes <= m.free_bytes, p
    kinds = {t.kind for t in v.correctness.trials}
    assert {"random", "adversarial", "shape"} <= kinds, kinds
    assert v.timing.status == "measured" and v.timing.compiled is not None
    assert v.accuracy.status == "measured" and v.accuracy.ratio is not None and not v.accuracy.less_accurate


def test_private_stream_cheat_is_flagged_at_6gib(verifier):
    v = run(verifier, SCALE / "ref_relu_scale_6gib.py", CORPUS / "cheat_private_stream.py", timing=False,
            second_shape=False, adversarial=False, timeout_s=540)
    assert v.status is VerdictStatus.HACKING and dynamic(v, "HACK004")
    assert v.streams.unjoined


def test_honest_two_streams_pass_at_6gib_with_all_their_work_timed(verifier):
    v = run(verifier, SCALE / "ref_relu_scale_6gib.py", CORPUS / "honest_two_streams.py", second_shape=False,
            adversarial=False, timeout_s=540)
    assert v.status is VerdictStatus.CORRECT, (v.summary, v.hack_flags)
    assert len(v.streams.streams) == 2 and not v.streams.unjoined
    # The forward's eager peak is two outputs (relu, then the product): the plan knew.
    assert v.memory.forward_peak_bytes == 12 * GiB
    # The GPU time covers the side stream's kernel too: at least the kernels' own durations, run one
    # after the other as the join orders them. (The profiler's span_us is host-side, launch gaps
    # included: GPU time rightly leaves those out.)
    kernels_us = sum(k.duration_us for k in v.streams.kernels)
    assert v.timing.candidate.median_ms * 1e3 >= 0.9 * kernels_us, (v.timing.candidate, v.streams.kernels)
