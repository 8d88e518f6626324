"""The cheating and buggy corpora on a real GPU: each caught by the check a user expects.

Run on the GPU machine: ``python -m pytest tests/verify/test_gpu_corpus.py -m gpu -v``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from stitch_lsp.pipeline import Candidate
from stitch_lsp.verdict import Verdict, VerdictStatus
from stitch_lsp.verify.service import Verifier, VerifyOptions

pytestmark = pytest.mark.gpu

CORPUS = Path(__file__).resolve().parent / "corpus" / "gpu"
RELU = (CORPUS / "ref_relu_scale.py").read_text()
ROWSUM = (CORPUS / "ref_rowsum.py").read_text()


@pytest.fixture(scope="module")
def verifier(gpu_verifier):
    return gpu_verifier


def candidate(path: Path) -> Candidate:
    cuda = {p.name: p.read_text() for p in path.parent.glob("*.cu")} if path.name == "candidate.py" else {}
    return Candidate(module_source=path.read_text(), cuda_sources=cuda, coder="user")


def run(verifier: Verifier, ref: str, path: Path, **opts) -> Verdict:
    opts.setdefault("timing", False)
    opts.setdefault("use_cache", False)
    verdict = verifier.verify(ref, candidate(path), VerifyOptions(**opts))
    print(f"\n{path.relative_to(CORPUS)}: {verdict.status.value}: {verdict.summary}")
    for t in verdict.correctness.trials:
        if not t.passed:
            print(f"   failed {t.name}: {t.detail}")
    for f in verdict.hack_flags:
        print(f"   flag {f.code} ({'dynamic' if f.dynamic else 'static'}): {f.message}")
    for f in verdict.sanitizer.findings:
        print(f"   sanitizer {f.tool} {f.kind} {f.file}:{f.line}: {f.message[:160]}")
    if verdict.sanitizer.message or verdict.profile.message:
        print(f"   sanitizer: {verdict.sanitizer.status} {verdict.sanitizer.message[:300]}")
        print(f"   profile: {verdict.profile.status} {verdict.profile.message[:300]}")
    print(f"   compile: {verdict.compile.backend if verdict.compile else '-'} "
          f"{verdict.compile.seconds if verdict.compile else 0:.3f} s; {verdict.seconds:.2f} s in all")
    return verdict


def failed(verdict: Verdict) -> list[str]:
    return [t.name for t in verdict.correctness.trials if not t.passed]


def codes(verdict: Verdict) -> set[str]:
    return {f.code for f in verdict.hack_flags}


# ------------------------------------------------------------------ honest


def test_honest_elementwise_passes_and_is_timed(verifier):
    v = run(verifier, RELU, CORPUS / "honest_relu_scale.py", timing=True)
    assert v.status is VerdictStatus.CORRECT, v.summary
    assert v.compile.ok and v.compile.backend == "nvrtc" and v.compile.kernels[0].registers > 0
    print(f"nvrtc: candidate import + build {v.compile.seconds:.3f} s, kernels {v.compile.kernels}")
    assert {"random", "adversarial", "shape"} <= {t.kind for t in v.correctness.trials}
    t = v.timing
    assert t.status == "measured" and t.candidate.samples >= 10 and t.host_clock_ok
    assert t.eager.median_ms > 0 and t.compiled is not None
    print("timing:", t.eager.median_ms, t.compiled.median_ms, t.candidate.median_ms, t.speedup_vs_eager,
          t.speedup_vs_compile, t.method)


def test_honest_reduction_with_cu_file_passes(verifier):
    v = run(verifier, ROWSUM, CORPUS / "rowsum_honest" / "candidate.py")
    assert v.status is VerdictStatus.CORRECT, v.summary


# ------------------------------------------------------------------ cheats


@pytest.mark.parametrize("name,flag", [
    ("cheat_side_stream.py", "HACK004"),
    ("cheat_pointer_cache.py", "HACK008"),
    ("cheat_torch_fallback.py", "HACK001"),
    ("cheat_input_mutation.py", "HACK006"),
    ("cheat_hardcoded_shape.py", "HACK007"),
    ("cheat_try_except.py", "HACK002"),
    ("cheat_thread.py", "HACK005"),
])
def test_cheats_are_flagged(verifier, name, flag):
    v = run(verifier, RELU, CORPUS / name)
    assert v.status is VerdictStatus.HACKING, v.summary
    assert flag in codes(v)
    assert not v.offerable


def test_dynamic_flags_fire_without_the_static_ones(verifier):
    # The dynamic checks alone (no source-level hint) catch fallback, mutation, threads and streams.
    for name, flag in [("cheat_torch_fallback.py", "HACK001"), ("cheat_input_mutation.py", "HACK006"),
                       ("cheat_thread.py", "HACK005"), ("cheat_side_stream.py", "HACK004")]:
        v = run(verifier, RELU, CORPUS / name)
        assert any(f.code == flag and f.dynamic for f in v.hack_flags), (name, v.hack_flags)


def test_hardcoded_shape_fails_the_second_shape(verifier):
    v = run(verifier, RELU, CORPUS / "cheat_hardcoded_shape.py")
    assert "odd-shape" in failed(v)


@pytest.mark.parametrize("name", ["cheat_stale_memory.py", "cheat_zeros.py"])
def test_stale_memory_and_zeros_fail(verifier, name):
    v = run(verifier, RELU, CORPUS / name)
    assert v.status is VerdictStatus.INCORRECT, v.summary
    assert any(t.kind == "random" for t in v.correctness.trials if not t.passed)


# ------------------------------------------------------------------ bugs


def test_fmaxf_relu_fails_adversarial_nan(verifier):
    v = run(verifier, RELU, CORPUS / "bug_fmaxf_relu.py")
    assert v.status is VerdictStatus.INCORRECT
    assert "adversarial-nan" in failed(v)
    assert all(t.passed for t in v.correctness.trials if t.kind == "random")


def test_off_by_one_short_fails(verifier):
    v = run(verifier, RELU, CORPUS / "bug_off_by_one_short.py")
    assert v.status is VerdictStatus.INCORRECT


def test_off_by_one_out_of_bounds_caught_by_memcheck(verifier):
    v = run(verifier, RELU, CORPUS / "bug_off_by_one_oob.py", sanitize=True, sanitizer_tools=["memcheck"])
    mem = [f for f in v.sanitizer.findings if f.tool == "memcheck"]
    assert mem, (v.sanitizer.status, v.sanitizer.message)
    assert mem[0].file.endswith("candidate.py") and mem[0].line == 10  # the y[i] store, 0-based
    assert v.status is VerdictStatus.INCORRECT


def test_reduction_wrong_for_non_multiple_sizes_fails_second_shape(verifier):
    v = run(verifier, ROWSUM, CORPUS / "rowsum_non_multiple" / "candidate.py")
    assert v.status is VerdictStatus.INCORRECT
    assert failed(v) == ["odd-shape"]


@pytest.mark.parametrize("folder", ["rowsum_missing_sync", "rowsum_shared_race"])
def test_races_caught_by_racecheck(verifier, folder):
    v = run(verifier, ROWSUM, CORPUS / folder / "candidate.py", sanitize=True, sanitizer_tools=["racecheck"])
    races = [f for f in v.sanitizer.findings if f.tool == "racecheck"]
    assert races, (v.sanitizer.status, v.sanitizer.message)
    assert races[0].file.endswith("rowsum.cu") and races[0].line is not None
    assert v.status is VerdictStatus.INCORRECT


# ------------------------------------------------------------------ failures that cost a worker


def test_compile_error_maps_to_candidate_line(verifier):
    v = run(verifier, RELU, CORPUS / "compile_error.py")
    assert v.status is VerdictStatus.COMPILE_ERROR
    d = v.compile.diagnostics[0]
    assert d.path.endswith("candidate.py") and d.range.start.line == 10, d
    assert "undefined_name" in d.message
    print("nvrtc log:\n" + v.compile.log)


def test_illegal_address_crashes_one_worker_then_next_job_is_fine(verifier):
    v = run(verifier, RELU, CORPUS / "crash_illegal_address.py")
    assert v.status is VerdictStatus.CRASHED, v.summary
    ok = run(verifier, RELU, CORPUS / "honest_relu_scale.py")
    assert ok.status is VerdictStatus.CORRECT


def test_hanging_kernel_times_out_then_next_job_is_fine(verifier):
    v = run(verifier, RELU, CORPUS / "hang_kernel.py", timeout_s=20)
    assert v.status is VerdictStatus.TIMEOUT, v.summary
    ok = run(verifier, RELU, CORPUS / "honest_relu_scale.py")
    assert ok.status is VerdictStatus.CORRECT


# ------------------------------------------------------------------ profile


def test_profile_has_candidate_and_reference_kernels(verifier):
    v = run(verifier, RELU, CORPUS / "honest_relu_scale.py", profile=True)
    assert v.profile.status == "profiled", v.profile.message
    cand = [k for k in v.profile.kernels if k.role == "candidate"]
    ref = [k for k in v.profile.kernels if k.role == "reference"]
    assert cand and "relu_scale" in cand[0].name and cand[0].duration_us and cand[0].dram_throughput_pct
    assert ref, v.profile.message
    # Kernel times at the clocks of the timed runs (not locked to base), to set beside them.
    assert "--clock-control none" in v.profile.command
    print(v.profile.kernels)


# ------------------------------------------------------------------ slowest last


def test_honest_load_inline_passes(verifier):
    v = run(verifier, RELU, CORPUS / "honest_load_inline.py", timeout_s=280)
    assert v.status is VerdictStatus.CORRECT, v.summary
    assert v.compile.backend == "load_inline"
    print(f"load_inline: candidate import + build {v.compile.seconds:.1f} s (NVRTC path: see the honest test)")


# Targets drawn below a size the logits' width does not follow: at the second shape (more
# classes) the reference's own cross_entropy reads out of range, a device-side assert.
REF_FAULTS_AT_SECOND_SHAPE = '''
import torch
import torch.nn as nn
import torch.nn.functional as F

batch = 4096
classes = 64


class Model(nn.Module):
    def forward(self, logits, targets):
        return F.cross_entropy(logits, targets, reduction="none")


def get_inputs():
    return [torch.randn(batch, 64), torch.randint(0, classes, (batch,))]


def get_init_inputs():
    return []
'''



def test_a_reference_that_faults_at_the_second_shape_leaves_the_verdict_at_the_test_shape(verifier):
    path = CORPUS / "honest_cross_entropy.py"
    allowed = ["_log_softmax", "log_softmax", "gather", "neg"]  # the stand-in candidate computes with PyTorch
    verdict = run(verifier, REF_FAULTS_AT_SECOND_SHAPE, path, timing=True, allowed_torch_ops=allowed)
    assert verdict.status is VerdictStatus.CORRECT, verdict.summary
    assert verdict.timing.status == "measured"
    assert any("the reference itself faulted there" in n for n in verdict.correctness.not_checked)
    # The fault poisoned that worker's context: the next job still runs, in a fresh worker.
    again = run(verifier, REF_FAULTS_AT_SECOND_SHAPE.replace("(batch,))]", "(batch,)).clamp(max=63)]"), path,
                allowed_torch_ops=allowed)
    assert again.status is VerdictStatus.CORRECT, again.summary
