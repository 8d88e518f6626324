"""A Verifier stand-in for the loop tests: real nvcc for compiling, scripted results after that.

Nothing here runs on a GPU. Compiling is real when asked (``nvcc -arch=sm_90``),
so that compile errors come back at the lines nvcc names; what a candidate
computes is scripted per test, as a GPU would have measured it.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Callable

from stitch_lsp.findings import Finding, Range, Severity
from stitch_lsp.pipeline import Candidate
from stitch_lsp.verify.nvcc_diagnostics import parse_nvcc_output, to_findings
from stitch_lsp.verdict import (
    CompileResult,
    Correctness,
    DeviceInfo,
    HackFlag,
    Timing,
    TimingStats,
    Trial,
    Verdict,
    VerdictStatus,
)

Script = Verdict | Callable[[Candidate], Verdict]


class ScriptedVerifier:
    def __init__(self, *verdicts: Script, nvcc: bool = False, judge: Callable[[Candidate], Verdict] | None = None):
        self._script = list(verdicts)
        self.nvcc = nvcc
        self.judge = judge  # answers once the script is used up
        self.seen: list[Candidate] = []
        self.options_seen: list[object] = []

    def verify(self, reference_source, candidate, options=None, *, cancel=None, report=None) -> Verdict:
        self.seen.append(candidate)
        self.options_seen.append(options)
        if self.nvcc:
            compiled = nvcc_compile(candidate)
            if not compiled.ok:
                return Verdict(VerdictStatus.COMPILE_ERROR, summary="compile error", compile=compiled)
        if not self._script and self.judge is not None:
            return self.judge(candidate)
        if not self._script:
            raise AssertionError("the verifier was called more often than the test scripted")
        step = self._script.pop(0)
        return step(candidate) if callable(step) else step


class SplitVerifier(ScriptedVerifier):
    """Answers ``yes`` for the candidates ``which`` holds for and ``no`` for the others, on a stand-in GPU:
    a fallback's two candidates (the GEMM family's or not, channels-last or not) told apart."""

    def __init__(self, which: Callable[[Candidate], bool], yes: Verdict, no: Verdict):
        super().__init__(judge=lambda c: yes if which(c) else no)

    def device_info(self) -> DeviceInfo:
        return DeviceInfo(name="Stand-in GPU")


def nvcc_compile(candidate: Candidate) -> CompileResult:
    """Compile each CUDA file with nvcc (device code, sm_90) and place its messages with Stitch's parser."""
    nvcc = shutil.which("nvcc")
    assert nvcc, "nvcc not on PATH"
    diagnostics: list[Finding] = []
    log, ok = "", True
    with tempfile.TemporaryDirectory(prefix="stitch-llm-test-") as tmp:
        for name, source in candidate.cuda_sources.items():
            path = Path(tmp) / name
            path.write_text(source)
            proc = subprocess.run([nvcc, "-arch=sm_90", "-c", str(path), "-o", str(path.with_suffix(".o"))],
                                  capture_output=True, text=True, timeout=300, cwd=tmp)
            log += proc.stderr
            ok = ok and proc.returncode == 0
            diagnostics += to_findings(parse_nvcc_output(proc.stderr), compiled_file=str(path), display_path=name,
                                       source_text=source, cwd=tmp)
    return CompileResult(ok=ok, backend="nvcc", diagnostics=diagnostics, log=log)


def compile_error(line: int, message: str, file: str = "kernel.cu") -> Verdict:
    diag = Finding(path=file, range=Range.line_span(line), severity=Severity.ERROR, code="nvcc", message=message)
    return Verdict(VerdictStatus.COMPILE_ERROR, summary="compile error",
                   compile=CompileResult(ok=False, backend="nvrtc", diagnostics=[diag]))


def _trials(failed: dict[str, float] | None = None) -> list[Trial]:
    failed = failed or {}
    names = ["seed-1", "seed-2", "seed-3", "seed-4", "seed-5", "adversarial-nan", "odd-shape"]
    return [Trial(name, passed=name not in failed, kind="adversarial" if "nan" in name else
                  "shape" if "shape" in name else "random", max_abs_err=failed.get(name, 0.0),
                  mismatches=4_194_304 if name in failed else 0) for name in names]


def incorrect(failed: dict[str, float]) -> Verdict:
    return Verdict(VerdictStatus.INCORRECT, summary=f"{len(failed)} of 7 trials failed",
                   compile=CompileResult(ok=True, backend="nvrtc"),
                   correctness=Correctness(status="failed", trials=_trials(failed), atol=1e-5, rtol=1e-5,
                                           dtype="float32"))


def large_trial_failed(max_abs_err: float, mismatches: int, numel: int) -> Verdict:
    """Every check passed but the adversarial-large trial, a few values off: how a GEMM or convolution that
    rounds otherwise than eager's fails (a fallback's cue)."""
    trial = Trial("adversarial-large", False, kind="adversarial", max_abs_err=max_abs_err, mismatches=mismatches,
                  detail=f"{mismatches} of {numel} values off by more than atol=0.0001+rtol=0.0001·|ref|")
    return Verdict(VerdictStatus.INCORRECT, summary="incorrect: 1 of 10 checks failed; first: adversarial-large",
                   correctness=Correctness(status="failed", trials=[trial], dtype="float32"))


def correct(speedup: float, *, eager_ms: float = 0.030) -> Verdict:
    return Verdict(VerdictStatus.CORRECT, summary=f"correct, {speedup:.2f}x over eager",
                   compile=CompileResult(ok=True, backend="nvrtc"),
                   correctness=Correctness(status="passed", trials=_trials(), atol=1e-5, rtol=1e-5, dtype="float32"),
                   timing=Timing(status="measured", eager=TimingStats(eager_ms),
                                 candidate=TimingStats(eager_ms / speedup), speedup_vs_eager=speedup,
                                 speedup_vs_compile=speedup / 1.1))


def behind_compile(speedup: float, vs_compile: float) -> Verdict:
    """Faster than eager, but slower than torch.compile with the whole interval below 1."""
    verdict = correct(speedup)
    verdict.timing.speedup_vs_compile = vs_compile
    verdict.timing.speedup_vs_compile_ci = [vs_compile - 0.01, vs_compile + 0.01]
    return verdict


def flagged_at_run_time(speedup: float = 50.0) -> Verdict:
    """What the Verifier's dynamic check says of a forward that computed with PyTorch."""
    verdict = correct(speedup)
    verdict.status = VerdictStatus.HACKING
    verdict.summary = "PyTorch compute ran during ModelNew.forward"
    verdict.hack_flags = [HackFlag("HACK001", "torch.relu ran inside ModelNew.forward", evidence="aten::relu",
                                   dynamic=True)]
    return verdict


class ParallelVerifier:
    """A verifier with ``slots`` GPUs: answers from the candidate itself (``judge``), takes ``delay_s``
    per call, and records how many calls overlapped."""

    def __init__(self, slots: int, judge: Callable[[Candidate], Verdict], delay_s: float = 0.3):
        self.slots, self.judge, self.delay_s = slots, judge, delay_s
        self.seen: list[Candidate] = []
        self.most_at_once = 0
        self._running = 0
        self._lock = threading.Lock()

    def verify(self, reference_source, candidate, options=None, *, cancel=None, report=None) -> Verdict:
        with self._lock:
            self._running += 1
            self.most_at_once = max(self.most_at_once, self._running)
            self.seen.append(candidate)
        try:
            time.sleep(self.delay_s)
            return self.judge(candidate)
        finally:
            with self._lock:
                self._running -= 1
