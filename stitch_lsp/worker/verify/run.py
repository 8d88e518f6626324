"""The ``verify`` request: compile, check and time one candidate against its reference.

Runs in the worker. Every failure a user can cause becomes a Verdict; only bugs
in this module raise. See DESIGN.md, "Verifier protocol", for what each check is for.
"""

from __future__ import annotations

import hashlib
import inspect
import os
import statistics
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import torch

from stitch_lsp.serde import from_dict
from stitch_lsp.verdict import (
    Accuracy,
    CompileResult,
    Correctness,
    DeviceInfo,
    Float64Judgement,
    HackFlag,
    KernelResources,
    MemoryPlan,
    StreamCheck,
    Timing,
    TimingStats,
    Trial,
    Verdict,
    VerdictStatus,
)
from stitch_lsp.contract import memory_plan as mp
from stitch_lsp.contract.verify import VerifyJob, VerifyOptions
from stitch_lsp.worker.verify import accuracy as acc
from stitch_lsp.worker import inputs as inp
from stitch_lsp.worker.basic_handlers import describe_device
from stitch_lsp.worker.verify.compare import (compare, count_finite, fingerprint, peak_abs, same_fingerprint, tensors,
                                      tolerance, values_only)
from stitch_lsp.worker.guards import ForbiddenTorchOp, guarded_call
from stitch_lsp.worker.memory_phases import PhaseMemory, make_plan
from stitch_lsp.worker.modules import compile_failure, import_file, is_compile_error
from stitch_lsp.worker.poison import poison_cached_blocks
from stitch_lsp.worker.stream_check import profile_call
from stitch_lsp.contract.intervals import TARGET_REL_HALF_WIDTH, median_interval, round_ratios
from stitch_lsp.worker import gpu_state
from stitch_lsp.worker.timing import LAUNCH_QUEUED, hidden_work, run_interleaved, stats

INIT_SEED = 1234
MIN_TRIALS = 5
SUSPICIOUS_SPEEDUP = 10.0
# A trial that fails against eager is judged against float64: each value may be off by the tolerance
# plus this many times eager's own error there (eager is no exact answer where an epilogue cancels).
EAGER_ERROR_MULTIPLE = 2.0
# An adversarial trial with finite inputs is judged only where the reference's output is finite (it can
# overflow its dtype); with less than this share of it finite, the trial is listed as not checked.
OVERFLOW_JUDGED_FRACTION = 0.01
# Small outputs are compared at a scaled tolerance when the reference's float32 run is this close
# to its float64 run, relative to its largest output: the values carry signal, not rounding noise.
SMALL_OUTPUT_AGREEMENT = 1e-3
KEEP_COMPILED_BYTES = 1 << 30
_RAISED = "ModelNew.forward raised"
_PRECISION_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}

_CUDA_FAULTS = ("illegal memory access", "misaligned address", "unspecified launch failure", "illegal instruction",
                "an illegal", "device-side assert", "CUDA error", "cudaErrorLaunchFailure", "hardware stack error",
                "operation not permitted when stream is capturing", "AcceleratorError")


@dataclass
class CandidateCall:
    """One call of ``ModelNew.forward`` in a trial, and what was seen around it."""

    out: Any = None
    error: BaseException | None = None
    ready: bool = True  # the output was complete on the caller's stream when forward returned
    final: tuple = ()  # the output's fingerprint after the device was synchronised
    mutated: list[int] = field(default_factory=list)  # inputs whose values changed


def _random_seed() -> int:
    return int.from_bytes(os.urandom(4), "little") & 0x7FFFFFFF


class Stop(Exception):
    """Ends the run with this verdict."""

    def __init__(self, verdict: Verdict) -> None:
        super().__init__(verdict.summary)
        self.verdict = verdict


def _short(exc: BaseException, limit: int = 400) -> str:
    text = f"{type(exc).__name__}: {exc}".strip()
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _where(exc: BaseException, path: str) -> str:
    """The innermost frame of ``exc`` that lies in ``path`` (file:line), for messages."""
    for frame in reversed(traceback.extract_tb(exc.__traceback__)):
        if frame.filename == path:
            return f" (line {frame.lineno})"
    return ""


def _is_oom(exc: BaseException) -> bool:
    return isinstance(exc, (MemoryError, torch.cuda.OutOfMemoryError)) or "out of memory" in str(exc).lower()


def _is_cuda_fault(exc: BaseException) -> bool:
    text = f"{type(exc).__name__}: {exc}"
    return any(marker in text for marker in _CUDA_FAULTS)


class VerifyRun:
    def __init__(self, job: VerifyJob, ctx: Any) -> None:
        self.job = job
        self.opts: VerifyOptions = job.options
        self.ctx = ctx
        self.cpu = self.opts.device == "cpu"
        self.device = torch.device("cpu")
        self.events: list[str] = []
        self.flags: list[HackFlag] = []
        self.trials: list[Trial] = []
        self.not_checked: list[str] = []
        self.info: DeviceInfo | None = None
        self.compile: CompileResult | None = None
        self.import_seconds = 0.0
        self.build_seconds = 0.0
        self.records_before = 0
        self.records_at_build: int | None = None
        self.plan = MemoryPlan()
        self.memory = PhaseMemory(self.plan, [], cuda=False)
        self.chunk = mp.CHUNK_ELEMENTS
        self.accuracy = Accuracy(message="not run")
        self.streams = StreamCheck(message="not run")
        self.atol_override: float | None = None  # set for small but exact outputs (small_but_exact)
        self.ref_seen: list[tuple[float, tuple]] = []  # (peak |value|, fingerprint) of each seed's reference output
        self.first_seed: int | None = None
        self.doing = "starting"
        self.started = time.perf_counter()
        cand = Path(job.candidate_path)
        self.files: dict[str, str] = {}
        for path in [job.candidate_path, *job.cuda_files]:
            try:
                self.files[path] = Path(path).read_text(errors="replace")
            except OSError:
                pass
        self.candidate_dir = cand.parent

    # ----------------------------------------------------------------- helpers

    def verdict(self, status: VerdictStatus, summary: str, **parts: Any) -> Verdict:
        parts.setdefault("compile", self.compile)
        corr = parts.pop("correctness", None) or Correctness(
            status="skipped", trials=self.trials, not_checked=self.not_checked)
        return Verdict(status=status, summary=summary, device=self.info, correctness=corr,
                       hack_flags=self.flags, events=self.events, seconds=time.perf_counter() - self.started,
                       memory=self.plan, accuracy=self.accuracy, streams=self.streams, **parts)

    def fail_from(self, exc: BaseException, doing: str) -> Verdict:
        """A verdict for an exception raised by user code while ``doing``."""
        if is_compile_error(exc):
            failure = compile_failure(exc, self.files, self.job.candidate_path)
            self.compile = CompileResult(ok=False, backend=failure.backend, diagnostics=failure.diagnostics,
                                         log=failure.log, seconds=time.perf_counter() - self.started)
            first = failure.diagnostics[0]
            return self.verdict(VerdictStatus.COMPILE_ERROR,
                                f"compile error: {Path(first.path).name}:{first.range.start.line + 1}: {first.message}")
        if _is_oom(exc):
            self.ctx.retire("out of memory")
            planned = ""
            if self.plan.status == "planned":
                planned = (f" (the memory plan allowed {mp.gib(self.plan.budget_bytes)} GiB of "
                           f"{mp.gib(self.plan.free_bytes)} GiB free)")
            return self.verdict(VerdictStatus.OUT_OF_MEMORY,
                                f"out of memory while {doing}{planned}: {_short(exc, 300)}")
        if _is_cuda_fault(exc):
            self.ctx.retire("CUDA context poisoned by a fault")
            return self.verdict(VerdictStatus.CRASHED, f"the kernel faulted while {doing}: {_short(exc, 300)}")
        return self.verdict(VerdictStatus.BAD_INPUT, f"{doing} raised {_short(exc)}{_where(exc, self.job.candidate_path)}")

    def sync(self) -> None:
        if not self.cpu:
            torch.cuda.synchronize()

    # ----------------------------------------------------------------- stages

    def setup_device(self) -> None:
        if self.cpu:
            self.events.append("CPU test mode: no CUDA kernel runs; compile, poisoning and GPU timing are skipped")
            self.not_checked.append("allocator poisoning (CPU test mode)")
            return
        if not torch.cuda.is_available() or self.opts.gpu_index >= torch.cuda.device_count():
            raise Stop(self.verdict(
                VerdictStatus.NO_GPU,
                f"no CUDA GPU visible to the worker (torch {torch.__version__}, CUDA {torch.version.cuda or 'none'}): "
                "nothing was run"))
        torch.cuda.set_device(self.opts.gpu_index)
        self.device = torch.device("cuda", self.opts.gpu_index)
        key = f"device_info:{self.opts.gpu_index}"
        if key not in self.ctx.state:
            self.ctx.state[key] = describe_device(self.opts.gpu_index)
        self.info = self.ctx.state[key]

    def load_reference(self) -> Any:
        try:
            ref = import_file(Path(self.job.reference_path), "reference")
        except BaseException as exc:  # noqa: BLE001
            raise Stop(self.verdict(VerdictStatus.BAD_INPUT, f"the reference raised on import: {_short(exc)}"))
        missing = [n for n in ("Model", "get_inputs") if not hasattr(ref, n)]
        if missing:
            raise Stop(self.verdict(VerdictStatus.BAD_INPUT,
                                    f"the reference is not in KernelBench format: no {' or '.join(missing)}"))
        if not hasattr(ref, "get_init_inputs"):
            ref.get_init_inputs = lambda: []
        return ref

    def load_candidate(self) -> Any:
        self.ctx.progress("compiling", "importing the candidate", 5)
        t0 = time.perf_counter()
        try:
            cand = import_file(Path(self.job.candidate_path), "candidate")
            self.import_seconds = time.perf_counter() - t0
        except BaseException as exc:  # noqa: BLE001
            raise Stop(self.fail_from(exc, "importing the candidate"))
        if not hasattr(cand, "ModelNew"):
            raise Stop(self.verdict(VerdictStatus.BAD_INPUT, "the candidate defines no ModelNew class"))
        return cand

    def check_signature(self, ref: Any, cand: Any) -> None:
        def positional(cls: Any, method: str) -> tuple[int, bool]:
            try:
                sig = inspect.signature(getattr(cls, method))
            except (TypeError, ValueError):
                return -1, True
            params = [p for p in sig.parameters.values() if p.name != "self"]
            variadic = any(p.kind is p.VAR_POSITIONAL for p in params)
            return len([p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
                        and p.default is p.empty]), variadic

        for method in ("forward", "__init__"):
            want, _ = positional(ref.Model, method)
            have, variadic = positional(cand.ModelNew, method)
            if want >= 0 and have >= 0 and not variadic and want != have:
                raise Stop(self.verdict(
                    VerdictStatus.BAD_INPUT,
                    f"wrong signature: ModelNew.{method} takes {have} argument(s), Model.{method} takes {want}"))

    def plan_memory(self, ref: Any) -> None:
        """The memory plan, from a meta-device run of the reference, before anything runs on the GPU."""
        self.ctx.progress("planning", "memory plan", 8)
        source = Path(self.job.reference_path).read_text(errors="replace")
        plan, sizes = make_plan(ref, source, self.opts, cuda=not self.cpu, timing=self.opts.timing)
        self.plan = plan
        # Poisoned blocks for a set of inputs and a set of outputs: whichever comes first takes
        # one, and the candidate's outputs still land in poisoned memory.
        blocks = (sizes.input_tensor_bytes + sizes.output_tensor_bytes) if sizes else []
        self.memory = PhaseMemory(plan, blocks, cuda=not self.cpu)
        if plan.compare_chunk_elements:
            self.chunk = plan.compare_chunk_elements
        if plan.status == "too_large":
            raise Stop(self.verdict(VerdictStatus.TOO_LARGE, "too large: " + plan.message))

    def build(self, ref: Any, cand: Any) -> tuple[Any, Any]:
        try:
            inp.seed_everything(INIT_SEED)
            init = list(ref.get_init_inputs())
            ref_model = ref.Model(*init)
        except BaseException as exc:  # noqa: BLE001
            raise Stop(self.verdict(VerdictStatus.BAD_INPUT, f"the reference raised while building Model: {_short(exc)}"))
        from stitch_lsp.runtime import loader

        self.records_before = len(loader.compile_records())
        t0 = time.perf_counter()
        try:
            inp.seed_everything(INIT_SEED)
            cand_model = cand.ModelNew(*init)
        except BaseException as exc:  # noqa: BLE001
            raise Stop(self.fail_from(exc, "ModelNew(*get_init_inputs())"))
        # Importing the module is part of the build (load_inline compiles at import time).
        seconds = time.perf_counter() - t0 + self.import_seconds
        ref_model = self.to_device(ref_model)
        cand_model = self.to_device(cand_model)
        self.copy_weights(ref_model, cand_model)
        self.build_seconds = seconds
        self.refresh_compile()
        return ref_model, cand_model

    def refresh_compile(self) -> None:
        """Kernels a candidate loads lazily (on its first forward) count as well."""
        if self.compile is not None and not self.compile.ok:
            return
        from stitch_lsp.runtime import loader

        records = loader.compile_records()[self.records_before:]
        # Records from construction are inside build_seconds; later (lazy) ones add their own time.
        lazy = sum(r.seconds for r in records[self.records_at_build:]) if self.records_at_build is not None else 0.0
        if self.records_at_build is None:
            self.records_at_build = len(records)
        self.compile = self.compile_result(records, self.build_seconds + lazy)

    def to_device(self, model: Any) -> Any:
        try:
            if isinstance(model, torch.nn.Module):
                model = model.to(self.device).eval()
                cast = _PRECISION_DTYPES.get(self.opts.precision)
                if cast is not None:  # as KernelBench casts both models (the reference's source casts itself)
                    model = model.to(cast)
        except BaseException as exc:  # noqa: BLE001
            raise Stop(self.fail_from(exc, "moving the model to the device"))
        return model

    def copy_weights(self, ref_model: Any, cand_model: Any) -> None:
        if not isinstance(ref_model, torch.nn.Module) or not isinstance(cand_model, torch.nn.Module):
            return
        ref_state = ref_model.state_dict()
        copied, skipped = 0, []
        with torch.no_grad():
            for name, value in cand_model.state_dict().items():
                src = ref_state.get(name)
                if src is not None and src.shape == value.shape:
                    value.copy_(src)
                    copied += 1
                else:
                    skipped.append(name)
        if copied or skipped:
            self.events.append(f"weights copied from the reference by name: {copied}"
                               + (f"; not in the reference (left as initialised): {', '.join(skipped[:8])}"
                                  if skipped else ""))

    def compile_result(self, records: list[Any], seconds: float) -> CompileResult:
        source = self.files.get(self.job.candidate_path, "")
        if records:
            unique: dict[tuple[str, str], Any] = {}
            for r in records:  # a kernel loaded again (second shape, every forward) is one kernel
                unique.setdefault((r.name, r.mangled, r.source_sha), r)
            kernels = [KernelResources(name=r.name, mangled=r.mangled, registers=r.registers,
                                       shared_bytes=r.shared_bytes, stack_bytes=r.local_bytes,
                                       constant_bytes=r.const_bytes) for r in unique.values()]
            cached = all(r.cached for r in unique.values())
            return CompileResult(ok=True, backend="nvrtc", seconds=seconds, cached=cached, kernels=kernels,
                                 log="\n".join(r.log for r in records if r.log))
        backend = "load_inline" if "load_inline" in source else "cupy" if "RawModule" in source or "RawKernel" in source \
            else "none"
        return CompileResult(ok=True, backend=backend, seconds=seconds)

    # ----------------------------------------------------------------- correctness

    def run_reference(self, ref_model: Any, make: Callable[[], list[Any]]) -> Any:
        values = make()
        try:
            out = ref_model(*values)
        except Stop:
            raise
        except BaseException as exc:  # noqa: BLE001
            if _is_oom(exc) or _is_cuda_fault(exc):
                raise Stop(self.fail_from(exc, "running the reference"))
            raise Stop(self.verdict(VerdictStatus.BAD_INPUT, f"the reference raised on its own inputs: {_short(exc)}"))
        del values
        self.sync()
        return out

    def run_candidate(self, cand_model: Any, make: Callable[[], list[Any]]) -> CandidateCall:
        """One forward on its own fresh inputs (never a clone held beside them).

        Fingerprints stand in for copies: of each input before and after (mutation), and of
        the output right after forward returns, on the caller's stream before any device-wide
        synchronise (work still running elsewhere shows as a different fingerprint later).
        """
        args = make()
        before = [fingerprint(a, self.chunk) for a in args]
        if not self.cpu:
            poison_cached_blocks()
        try:
            out = cand_model(*args)
            ready = fingerprint(out, self.chunk)
            if not self.cpu:
                torch.cuda.current_stream().synchronize()
        except ForbiddenTorchOp:
            raise
        except BaseException as exc:  # noqa: BLE001
            if _is_oom(exc) or _is_cuda_fault(exc) or is_compile_error(exc):
                raise Stop(self.fail_from(exc, "running ModelNew.forward"))
            return CandidateCall(error=exc)
        self.sync()
        final = fingerprint(out, self.chunk)
        mutated = [i for i, (a, fp) in enumerate(zip(args, before))
                   if not same_fingerprint(fingerprint(a, self.chunk), fp)]
        return CandidateCall(out=out, ready=same_fingerprint(ready, final), final=final, mutated=mutated)

    def trial(self, name: str, kind: str, ref_model: Any, cand_model: Any, make: Callable[[], list[Any]],
              candidate_first: bool, detail: str = "", overflow_left_out: bool = False) -> tuple[Trial, Any]:
        """``make()`` draws the trial's inputs; each side gets its own draw of the same values.
        ``overflow_left_out``: the inputs are adversarial and all finite, so where the reference's output is
        not finite it overflowed its dtype, and those positions are not judged (``compare_tensor``)."""
        if candidate_first:
            call = self.run_candidate(cand_model, make)
            ref_out = self.run_reference(ref_model, make)
        else:
            ref_out = self.run_reference(ref_model, make)
            call = self.run_candidate(cand_model, make)
        order = "candidate before reference" if candidate_first else "reference before candidate"
        prefix = f"{detail}; " if detail else ""
        if call.error is not None:
            return Trial(name=name, kind=kind, passed=False,
                         detail=f"{prefix}{_RAISED} {_short(call.error)}"), ref_out
        result = compare(ref_out, call.out, self.opts.rtol, self.atol, self.chunk,
                         undefined_where_not_finite=overflow_left_out)
        late = not same_fingerprint(fingerprint(call.out, self.chunk), call.final)
        trial = Trial(name=name, kind=kind, passed=result.passed, max_abs_err=result.max_abs,
                      max_rel_err=result.max_rel, mismatches=result.mismatches,
                      detail=prefix + (result.detail or order), left_out=result.left_out)
        if result.left_out:
            trial.detail += (f"; {result.left_out} of {result.numel} output values not judged: the reference is "
                             "not finite there from finite inputs (it overflowed its dtype)")
        if not result.passed and kind in ("random", "adversarial") and not result.misplaced \
                and values_only(ref_out, call.out):
            self.judge_against_float64(trial, ref_model, make, ref_out, call.out, overflow_left_out)
        if not call.ready or late:
            self.flag("HACK004", "the output was not ready on the current stream when forward returned: work runs on "
                                 "another stream or thread (the timer would not see it)", evidence=name, dynamic=True)
            trial.passed = False
            trial.detail += "; the output was still changing after forward returned"
        if call.mutated:
            self.flag("HACK006", f"ModelNew.forward modified its input(s) {call.mutated}", evidence=name,
                      dynamic=True)
            trial.passed = False
            trial.detail += f"; inputs {call.mutated} were modified"
        return trial, ref_out

    def judge_against_float64(self, trial: Trial, ref_model: Any, make: Callable[[], list[Any]], ref_out: Any,
                              out: Any, overflow_left_out: bool = False) -> None:
        """A trial that failed against eager, judged again against a float64 run of the reference on the
        same inputs (see ``compare_tensor``): where eager's own last bits show (large inputs through an
        epilogue that cancels), a candidate closer to the exact answer than eager is not wrong."""
        judgement = Float64Judgement(eager_multiple=EAGER_ERROR_MULTIPLE)
        trial.float64 = judgement
        if not mp.runs(self.plan, "rejudge"):
            judgement.message = f"not judged against float64: {mp.phase(self.plan, 'rejudge').note}"
            trial.detail += f"; {judgement.message}"
            return
        doing, self.doing = self.doing, f"judging {trial.name} against float64"
        try:
            with self.memory.within("rejudge"):
                out64, why = acc.float64_outputs(ref_model, make, self.sync)
                again = None if out64 is None else compare(
                    ref_out, out, self.opts.rtol, self.atol, max(1, self.chunk // 2), ref64=out64,
                    eager_multiple=EAGER_ERROR_MULTIPLE, undefined_where_not_finite=overflow_left_out)
                del out64
        except Stop:
            raise
        except BaseException as exc:  # noqa: BLE001
            if _is_cuda_fault(exc):
                raise
            again, why = None, _short(exc, 200)  # out of memory (the plan erred): the judgement stands
            self.memory.release()
        finally:
            self.doing = doing
        if again is None or again.eager_max_abs is None:
            judgement.message = f"not judged against float64: {why or 'no floating-point output to judge'}"
            trial.detail += f"; {judgement.message}"
            return
        judgement.passed = again.passed
        judgement.candidate_max_abs_err, judgement.eager_max_abs_err = again.max_abs, again.eager_max_abs
        judgement.mismatches = again.mismatches
        cand_err = f"{again.max_abs:.3g}" if again.max_abs is not None else "?"  # None: an exact output differs
        figures = f"max |error| against float64: candidate {cand_err}, eager {again.eager_max_abs:.3g}"
        if again.passed:
            trial.passed = True
            how = (again.as_a_whole or f"every value within the tolerance + {EAGER_ERROR_MULTIPLE:g}x eager's "
                   "error there")
            trial.detail += (f"; judged against float64 instead (eager's own error shows here), and passes: "
                             f"{figures}; {how}")
        else:
            trial.detail += f"; judged against float64 too, and fails: {figures}; {again.detail}"

    def flag(self, code: str, message: str, *, evidence: str = "", dynamic: bool = True) -> None:
        if not any(f.code == code for f in self.flags):
            self.flags.append(HackFlag(code=code, message=message, evidence=evidence, dynamic=dynamic))

    def correctness(self, ref: Any, cand: Any, ref_model: Any, cand_model: Any) -> Correctness:
        n = max(MIN_TRIALS, self.opts.trials)
        seeds = [_random_seed() for _ in range(n)]
        self.first_seed = seeds[0]
        first = self.random_trials(ref, ref_model, cand_model, seeds)
        dtype = str(first.dtype).replace("torch.", "") if first is not None else ""
        rtol, atol = tolerance(first.dtype, self.opts.rtol, self.opts.atol) if first is not None else (0.0, 0.0)
        floating = first is not None and first.is_floating_point()
        del first
        why = self.unverifiable_reason(atol) if floating else ""
        if why and self.small_but_exact(ref, ref_model, seeds[0], atol):
            # Judged again at a tolerance of the outputs' own scale: zeros no longer pass.
            del self.trials[:], self.ref_seen[:]
            self.random_trials(ref, ref_model, cand_model, seeds)
            atol, why = self.atol, ""
        if why:
            return Correctness(status="unverifiable", trials=self.trials, atol=atol, rtol=rtol, dtype=dtype,
                               message=why, not_checked=self.not_checked)
        if self.opts.adversarial:
            self.doing = "running the adversarial trials"
            self.adversarial(ref, ref_model, cand_model)
        else:
            self.not_checked.append("adversarial values (turned off)")
        return self.settle(Correctness(trials=self.trials, atol=atol, rtol=rtol, dtype=dtype,
                                       not_checked=self.not_checked))

    def random_trials(self, ref: Any, ref_model: Any, cand_model: Any, seeds: list[int]) -> torch.Tensor | None:
        """The seeded trials; returns the first output tensor (its dtype sets the tolerance)."""
        first: torch.Tensor | None = None
        self.doing = "running the trials"
        for i, seed in enumerate(seeds):
            self.ctx.progress("checking", f"trial {i + 1} of {len(seeds)}", 20 + int(30 * i / len(seeds)))
            trial, ref_out = self.trial(f"seed-{seed}", "random", ref_model, cand_model, self.drawer(ref, seed),
                                        i % 2 == 0)
            self.trials.append(trial)
            first = first if first is not None else next(iter(tensors(ref_out)), None)
            # What the unverifiable check needs, not the output itself (a 6 GiB output per seed).
            self.ref_seen.append((peak_abs(ref_out, self.chunk), fingerprint(ref_out, self.chunk)))
            del ref_out
        return first

    def small_but_exact(self, ref: Any, ref_model: Any, seed: int, atol: float) -> bool:
        """Outputs all under the tolerance can still be signal (x / ||x|| over a huge tensor is ~1e-5
        everywhere): when the reference agrees with its float64 run to SMALL_OUTPUT_AGREEMENT of its
        largest value, the outputs are compared at ``atol`` scaled by that value (as if normalised to 1);
        when it does not (a mean of normalised values: rounding noise around 0), nothing can be proven."""
        peak = max((p for p, _ in self.ref_seen), default=0.0)
        prints = [fp for _, fp in self.ref_seen]
        constant = len(prints) > 1 and all(same_fingerprint(prints[0], fp) for fp in prints[1:])
        if not 0.0 < peak <= atol or constant or not mp.runs(self.plan, "rejudge"):
            return False
        self.ctx.progress("checking", "small outputs: the reference against float64", 40)
        doing, self.doing = self.doing, "checking the reference's small outputs against float64"
        try:
            with self.memory.within("rejudge"):
                make = self.drawer(ref, seed)
                ref_out = ref_model(*make())
                out64, _ = acc.float64_outputs(ref_model, make, self.sync)
                gap = None if out64 is None else compare(ref_out, ref_out, 0.0, atol, max(1, self.chunk // 2),
                                                         ref64=out64).eager_max_abs
                del ref_out, out64
        except Stop:
            raise
        except BaseException as exc:  # noqa: BLE001
            if _is_cuda_fault(exc):
                raise
            self.memory.release()
            return False
        finally:
            self.doing = doing
        if gap is None or gap > SMALL_OUTPUT_AGREEMENT * peak:
            return False
        self.atol_override = atol * peak
        self.events.append(f"every output is under the tolerance (max |out| {peak:.3g} <= atol {atol:.3g}) but the "
                           f"reference agrees with float64 to {gap:.3g}: compared at atol {self.atol_override:.3g} "
                           "(atol x max |out|)")
        return True

    @property
    def atol(self) -> float | None:
        return self.opts.atol if self.atol_override is None else self.atol_override

    @staticmethod
    def settle(correctness: Correctness) -> Correctness:
        """Status and message from the trials run so far."""
        trials = correctness.trials
        failed = [t for t in trials if not t.passed]
        correctness.status = "failed" if failed else "passed"
        correctness.message = (f"{len(failed)} of {len(trials)} checks failed; first: {failed[0].name}: "
                               f"{failed[0].detail}" if failed else f"{len(trials)} checks passed")
        return correctness

    def check_second_shape(self, ref: Any, cand: Any) -> None:
        if not self.opts.second_shape:
            self.not_checked.append("second shape (turned off)")
        elif not mp.runs(self.plan, "second_shape"):
            self.not_checked.append(f"second shape: no room on the GPU ({mp.phase(self.plan, 'second_shape').note})")
        else:
            self.ctx.progress("checking", "second shape", 60)
            self.doing = "checking the second shape"
            with self.memory.phase("second_shape"):
                self.second_shape(ref, cand)

    def draw(self, ref: Any, seed: int) -> list[Any]:
        try:
            return inp.draw(ref, seed, self.device)
        except BaseException as exc:  # noqa: BLE001
            if _is_oom(exc):
                raise Stop(self.fail_from(exc, "drawing the inputs"))
            raise Stop(self.verdict(VerdictStatus.BAD_INPUT, f"the reference's get_inputs() raised: {_short(exc)}"))

    def drawer(self, ref: Any, seed: int, case: str = "") -> Callable[[], list[Any]]:
        """Draws the same inputs each time it is called (seeded), adversarial values planted."""
        if case:
            return lambda: inp.adversarial(self.draw(ref, seed), case, seed, self.chunk)
        return lambda: self.draw(ref, seed)

    def unverifiable_reason(self, atol: float) -> str:
        if not self.ref_seen:
            return ""
        peak = max(p for p, _ in self.ref_seen)
        if peak <= atol:
            return (f"the reference's output is near zero for every seed (max |out| = {peak:.3g} <= atol {atol:.3g}): "
                    "any kernel returning zeros would pass, so nothing is proven")
        prints = [fp for _, fp in self.ref_seen]
        if len(prints) > 1 and all(same_fingerprint(prints[0], fp) for fp in prints[1:]):
            return ("the reference's output is the same for every seed: it does not depend on the inputs, so a "
                    "kernel could hard-code it")
        return ""

    def adversarial(self, ref: Any, ref_model: Any, cand_model: Any) -> None:
        for j, case in enumerate(inp.ADVERSARIAL_CASES):
            self.ctx.progress("checking", f"adversarial: {case}", 45 + 3 * j)
            seed = _random_seed()
            make = self.drawer(ref, seed, case)
            values = make()
            if not any(isinstance(v, torch.Tensor) and v.is_floating_point() for v in values):
                self.not_checked.append(f"adversarial-{case}: no floating-point input")
                continue
            # NaN / ±Inf planted in the inputs: where they land is the check. All finite: a non-finite output
            # is the reference overflowing its dtype, where it defines nothing.
            finite_in, total_in = count_finite(values, self.chunk)
            finite_inputs = finite_in == total_in
            try:
                probe = ref_model(*values)
            except BaseException as exc:  # noqa: BLE001
                if _is_oom(exc) or _is_cuda_fault(exc):
                    raise Stop(self.fail_from(exc, "running the reference on adversarial inputs"))
                self.not_checked.append(f"adversarial-{case}: the reference raises on such inputs ({_short(exc, 120)})")
                continue
            finally:
                del values
            finite, total = count_finite(probe, self.chunk)
            del probe
            if total and not finite and not finite_inputs:
                self.not_checked.append(f"adversarial-{case}: the reference's output is entirely NaN/Inf")
                continue
            # From finite inputs, an output with nothing (or next to nothing) finite is an overflow.
            if finite_inputs and total and finite < OVERFLOW_JUDGED_FRACTION * total:
                self.not_checked.append(
                    f"adversarial-{case}: the reference overflows its dtype on such inputs (not finite in "
                    f"{total - finite} of {total} output values, from finite inputs): too little is defined to judge")
                continue
            trial, _ = self.trial(f"adversarial-{case}", "adversarial", ref_model, cand_model, make, j % 2 == 1,
                                  detail=f"seed {seed}", overflow_left_out=finite_inputs)
            self.trials.append(trial)

    def second_shape(self, ref: Any, cand: Any) -> None:
        source = Path(self.job.reference_path).read_text(errors="replace")
        sizes = inp.size_globals(ref, source)
        if not sizes:
            self.not_checked.append("second shape: the reference has no module-level size constants (>= 8) used by "
                                    "get_inputs/get_init_inputs, so no other shape could be derived")
            return
        errors = []
        for option in inp.odd_shape_candidates(sizes):
            restore = inp.with_globals(ref, option, source)
            try:
                try:
                    inp.seed_everything(INIT_SEED)
                    init = list(ref.get_init_inputs())
                    ref_model = self.to_device(ref.Model(*init))
                    seed = _random_seed()
                    make = lambda: inp.draw(ref, seed, self.device)  # noqa: E731 - raises here, not Stop
                    ref_model(*make())
                    self.sync()
                except Stop:
                    raise
                except BaseException as exc:  # noqa: BLE001
                    if _is_cuda_fault(exc):
                        self.ctx.retire("CUDA context poisoned by a fault in the reference")
                        self.not_checked.append(
                            f"second shape ({', '.join(f'{k}={v}' for k, v in option.items())}): the reference itself "
                            f"faulted there ({_short(exc, 160)}); the candidate is verified at the test shape only")
                        return
                    if _is_oom(exc):
                        raise Stop(self.fail_from(exc, "running the reference at the second shape"))
                    errors.append(f"{', '.join(option)}: {_short(exc, 100)}")
                    continue
                change = inp.ShapeChange({k: (sizes[k], v) for k, v in option.items()})
                try:
                    inp.seed_everything(INIT_SEED)
                    cand_model = self.to_device(cand.ModelNew(*init))
                except Stop:
                    raise
                except BaseException as exc:  # noqa: BLE001
                    if is_compile_error(exc) or _is_oom(exc) or _is_cuda_fault(exc):
                        raise Stop(self.fail_from(exc, "building ModelNew for the second shape"))
                    self.refused_shape(change, f"ModelNew(...) raised {_short(exc)}")
                    return
                self.copy_weights(ref_model, cand_model)
                trial, _ = self.trial("odd-shape", "shape", ref_model, cand_model, make, True,
                                      detail=change.describe())
                if not trial.passed and _RAISED in trial.detail:
                    self.refused_shape(change, trial.detail.split("; ", 1)[-1])
                    return
                self.trials.append(trial)
                if len(option) < len(sizes):
                    self.not_checked.append(
                        f"second shape: only {change.describe()} could change (the reference rejects the others "
                        "together)")
                return
            finally:
                restore()
        self.not_checked.append("second shape: the reference raised for every perturbed size: " + "; ".join(errors[:3]))

    def refused_shape(self, change: Any, why: str) -> None:
        # Raising is not a wrong answer: a kernel specialised to the test shape (as fused kernels
        # generated for one call site are) may refuse others. Correctness then holds for the test
        # shape only, and the verdict says so.
        self.not_checked.append(f"second shape ({change.describe()}): the candidate refuses it ({why[:200]}); "
                                "it is verified for the test shape only")

    # ----------------------------------------------------------------- dynamic anti-hacking

    def dynamic_checks(self, ref: Any, cand_model: Any) -> None:
        self.ctx.progress("checking", "anti-hacking", 70)
        self.doing = "running the anti-hacking checks"
        args = self.draw(ref, _random_seed())
        result, error, report = guarded_call(lambda: cand_model(*args), self.opts.allowed_torch_ops, cuda=not self.cpu)
        del args, result
        self.sync()
        if report.torch_ops:
            self.flag("HACK001", "ModelNew.forward computes with PyTorch: " + ", ".join(report.torch_ops[:8])
                      + " (these raise when PyTorch compute is forbidden; glue like empty/view/reshape is allowed)",
                      evidence="guarded forward")
        if report.allowed_torch_ops:
            self.events.append("left in PyTorch by design: " + ", ".join(report.allowed_torch_ops))
        if report.threads_started or report.threads_alive_after:
            names = report.threads_started or report.threads_alive_after
            self.flag("HACK005", f"ModelNew.forward starts threads ({', '.join(names[:4])}); work can finish after "
                                 "forward returns", evidence="guarded forward")
            self.ctx.retire("the candidate left threads running")
        if error is not None and not isinstance(error, ForbiddenTorchOp) and not report.torch_ops:
            self.events.append(f"the guarded forward raised {_short(error, 200)}")
        self.check_streams(ref, cand_model, report)

    def check_streams(self, ref: Any, cand_model: Any, report: Any) -> None:
        """Every kernel's stream, from the profiler; unjoined side-stream work is flagged whatever its length."""
        used = []
        if report.side_stream_launches:
            used.append(f"launches {', '.join(sorted(set(report.side_stream_launches)))} on a non-current stream")
        if report.streams_created:
            used.append(f"creates {report.streams_created} stream(s)")
        if report.stream_switched:
            self.flag("HACK004", "ModelNew.forward leaves a different stream current: the caller's timer and its "
                                 "later work run on a stream the candidate chose", evidence="guarded forward")
        if self.cpu:
            self.streams = StreamCheck(status="skipped", message="CPU test mode: no CUDA streams")
            return
        args = self.draw(ref, _random_seed())
        _, _, self.streams = profile_call(lambda: cand_model(*args))
        del args
        self.sync()
        check = self.streams
        if check.status == "checked":
            if check.unjoined:
                self.flag("HACK004", "ModelNew.forward " + check.message[0].lower() + check.message[1:]
                          + ": the timer on the caller's stream would not see that work", evidence="profiler")
            elif used:
                self.events.append("ModelNew.forward " + " and ".join(used) + "; the profiler saw every side-stream "
                                   "kernel joined back to the caller's stream before forward returned")
        elif used:
            self.flag("HACK004", "ModelNew.forward " + " and ".join(used) + ": the timer on the current stream would "
                                 f"not see that work (the profiler's stream check could not run: {check.message})",
                      evidence="guarded forward")

    # ----------------------------------------------------------------- accuracy

    def measure_accuracy(self, ref: Any, ref_model: Any, cand_model: Any, correct: bool) -> None:
        if not correct:
            self.accuracy = Accuracy(message="not measured: the candidate is not correct")
            return
        if self.first_seed is None:
            return
        if not mp.runs(self.plan, "accuracy"):
            self.accuracy = Accuracy(message=f"not measured: {mp.phase(self.plan, 'accuracy').note}")
            return
        self.ctx.progress("checking", "accuracy against float64", 74)
        self.doing = "measuring accuracy against float64"
        try:
            with self.memory.phase("accuracy"):
                self.accuracy = acc.measure(ref_model, cand_model, self.drawer(ref, self.first_seed),
                                            self.first_seed, chunk=self.chunk, sync=self.sync)
        except Stop:
            raise
        except BaseException as exc:  # noqa: BLE001
            if _is_cuda_fault(exc):
                raise
            # Out of memory here (the plan erred) or the float64 run failing: the figure is missing, nothing more.
            self.accuracy = Accuracy(status="error", seed=self.first_seed,
                                     message=f"not measured: {_short(exc, 240)}")
            self.memory.release()

    # ----------------------------------------------------------------- timing

    def timing(self, ref: Any, ref_model: Any, cand_model: Any, correct: bool) -> Timing:
        if not self.opts.timing:
            return Timing(status="skipped", message="timing turned off")
        if not correct:
            return Timing(status="skipped", message="not timed: the candidate is not correct")
        planned = mp.phase(self.plan, "timing")
        if planned is not None and not planned.runs:
            return Timing(status="skipped", message=f"not timed: {planned.note}")
        self.ctx.progress("timing", "warming up", 75)
        self.doing = "timing"
        n_sets = self.plan.timing_input_sets or (2 if self.cpu else mp.MAX_TIMING_SETS)
        sets = [self.draw(ref, _random_seed()) for _ in range(n_sets)]
        contenders: dict[str, Any] = {"eager": lambda a: ref_model(*a)}
        message = []
        if planned is not None and planned.note:
            message.append(f"memory plan: {planned.note}")
        if self.opts.compile_baseline and not self.cpu and self.plan.compile_baseline:
            compiled = self.compiled_reference(ref_model, sets[0])
            if not isinstance(compiled, str) and not self.ctx.state.get("compiled_reused"):
                compiled = self.warm_compiled(compiled, sets[0])
            if isinstance(compiled, str):
                message.append(compiled)
            else:
                contenders["compiled"] = lambda a: compiled(*a)
        elif not self.opts.compile_baseline:
            message.append("torch.compile baseline turned off")
        elif self.cpu:
            message.append("torch.compile baseline skipped in CPU test mode")
        contenders["candidate"] = lambda a: cand_model(*a)
        self.ctx.progress("timing", "interleaved rounds", 80)
        pairs = [("eager", "candidate"), ("compiled", "candidate")]
        clocks = [gpu_state.snapshot(torch.cuda.current_device())] if not self.cpu else []
        try:
            run = run_interleaved(contenders, sets, cuda=not self.cpu, budget_s=self.opts.timing_budget_s, pairs=pairs)
        except Stop:
            raise
        except BaseException as exc:  # noqa: BLE001
            if "compiled" in contenders and "candidate" not in str(exc) and not _is_cuda_fault(exc):
                contenders.pop("compiled")
                message.append(f"torch.compile failed while timing: {_short(exc, 200)}")
                self.ctx.state.pop("compiled", None)
                del sets[1:]
                self.memory.release()
                run = run_interleaved(contenders, sets, cuda=not self.cpu, budget_s=self.opts.timing_budget_s,
                                      pairs=pairs)
            else:
                raise Stop(self.fail_from(exc, "timing the candidate"))
        if not self.cpu:
            clocks.append(gpu_state.snapshot(torch.cuda.current_device()))
        timing = self.timing_figures(run, "compiled" in contenders)
        if not self.cpu:
            timing.clocks = gpu_state.notes(clocks)
            samples = run.samples
            hidden, text = hidden_work(samples["candidate"], samples["eager"])
            timing.host_clock_ok = not hidden
            if hidden:
                self.flag("HACK004", "work hidden from the timer: " + text, evidence="timing", dynamic=True)
            covered = ("every kernel of forward ran on the caller's stream or was joined back to it (profiler), so "
                       "the events span all of its work; " if self.streams.status == "checked" else "")
            queued = ("calls queued back to back behind a blocking kernel, so host launch cost stays out of the "
                      "events" if run.launch == LAUNCH_QUEUED else
                      "a contender waits for the device inside its call, so its calls could not be queued ahead "
                      "and its GPU time includes host time")
            timing.method = (f"GPU time: {queued}; L2 flushed (256 MB write) before each call, inputs rotated among "
                             f"{len(sets)} set(s), contenders interleaved over {run.rounds} rounds of "
                             f"{run.calls_per_round} call(s); {run.stop_reason}; call latency: host clock around one "
                             f"synchronised call per round; {covered}{text}")
            if timing.clocks.flagged:
                message.extend(timing.clocks.notes)
        else:
            timing.method = (f"CPU test mode: host clock, {run.rounds} interleaved rounds, inputs rotated among "
                             f"{len(sets)} sets; {run.stop_reason}")
        if not timing.converged and timing.speedup_vs_eager is not None:
            message.append(f"not converged: {run.stop_reason}; the intervals say how far the ratios may be off")
        timing.message = "; ".join(message)
        return timing

    def timing_figures(self, run: Any, with_compiled: bool) -> Timing:
        """The run's medians, ratios and intervals, GPU time first, call latency beside it."""
        s = run.samples
        timing = Timing(status="measured", compile_mode=self.opts.compile_mode, launch=run.launch,
                        rounds=run.rounds, converged=run.converged, ci_target=TARGET_REL_HALF_WIDTH,
                        compile_reused=bool(self.ctx.state.get("compiled_reused")) and with_compiled)
        timing.eager = TimingStats(**stats(s["eager"].gpu_ms))
        timing.candidate = TimingStats(**stats(s["candidate"].gpu_ms))
        timing.eager_latency = TimingStats(**stats(s["eager"].latency_ms))
        timing.candidate_latency = TimingStats(**stats(s["candidate"].latency_ms))
        if with_compiled:
            timing.compiled = TimingStats(**stats(s["compiled"].gpu_ms))
            timing.compiled_latency = TimingStats(**stats(s["compiled"].latency_ms))
        for base, attr in (("eager", "eager"), ("compiled", "compile")):
            if base not in s:
                continue
            gpu = median_interval(round_ratios(s[base].round_gpu_ms, s["candidate"].round_gpu_ms))
            lat = median_interval(round_ratios(s[base].latency_ms, s["candidate"].latency_ms))
            if gpu is not None:
                setattr(timing, f"speedup_vs_{attr}", gpu.value)
                setattr(timing, f"speedup_vs_{attr}_ci", [gpu.low, gpu.high])
            elif s[base].gpu_ms and s["candidate"].gpu_ms and statistics.median(s["candidate"].gpu_ms) > 0:
                setattr(timing, f"speedup_vs_{attr}",
                        statistics.median(s[base].gpu_ms) / statistics.median(s["candidate"].gpu_ms))
            if lat is not None:
                setattr(timing, f"latency_vs_{attr}", lat.value)
                setattr(timing, f"latency_vs_{attr}_ci", [lat.low, lat.high])
        return timing

    def compiled_reference(self, ref_model: Any, args: list[Any]) -> Any:
        """torch.compile of the reference in the chosen mode, once per reference source, mode and input
        signature in this worker: later saves of the same pair reuse it (unless the job says no cache)."""
        signature = [(tuple(a.shape), str(a.dtype)) if isinstance(a, torch.Tensor) else repr(a) for a in args]
        key = "compiled:" + hashlib.sha256(Path(self.job.reference_path).read_bytes()
                                           + repr((self.opts.compile_mode, signature)).encode()).hexdigest()
        cache = self.ctx.state.setdefault("compiled", {})
        self.ctx.state["compiled_reused"] = False
        if key in cache and self.opts.use_cache:
            cached_model, compiled = cache[key]
            # Same source, same init seed: the cached model's weights equal this one's.
            if all(torch.equal(a, b) for a, b in zip(cached_model.state_dict().values(),
                                                       ref_model.state_dict().values())):
                self.ctx.state["compiled_reused"] = True
                return compiled
        try:
            if self.opts.compile_mode == "default":
                compiled = torch.compile(ref_model)
            else:
                compiled = torch.compile(ref_model, mode=self.opts.compile_mode)
        except BaseException as exc:  # noqa: BLE001
            return f"torch.compile failed: {_short(exc, 200)}"
        cache.clear()  # one reference at a time: compiled graphs hold GPU memory
        cache[key] = (ref_model, compiled)
        return compiled

    def warm_compiled(self, compiled: Any, args: list[Any]) -> Any:
        """The first call, where Inductor compiles: its own step in the bench's time, out of the warm-up."""
        self.ctx.progress("timing", "torch.compile baseline compiling", 76)
        try:
            compiled(*args)
            self.sync()
        except Stop:
            raise
        except BaseException as exc:  # noqa: BLE001
            if _is_cuda_fault(exc):
                raise
            self.ctx.state.pop("compiled", None)
            self.memory.release()
            return f"torch.compile failed: {_short(exc, 200)}"
        return compiled

    def scrutiny(self, ref: Any, ref_model: Any, cand_model: Any, timing: Timing) -> None:
        """Over 10x: more seeds, a determinism check, and a device-wide host-clock timing."""
        timing.suspicious = True
        self.ctx.progress("checking", "extra scrutiny (speedup over 10x)", 90)
        self.doing = "running the extra scrutiny"
        for k in range(5):
            seed = _random_seed()
            trial, _ = self.trial(f"scrutiny-seed-{seed}", "random", ref_model, cand_model, self.drawer(ref, seed),
                                  k % 2 == 0, detail="extra trial for a >10x speedup")
            self.trials.append(trial)
        make = self.drawer(ref, 77)
        a = fingerprint(cand_model(*make()), self.chunk)
        self.sync()
        b = fingerprint(cand_model(*make()), self.chunk)
        self.sync()
        same = same_fingerprint(a, b)
        self.trials.append(Trial(name="determinism", kind="determinism", passed=True,
                                 detail="two runs on the same inputs agree bit for bit" if same else
                                 "two runs on the same inputs differ (atomics or a race); both within tolerance"))
        note = f"speedup {timing.speedup_vs_eager:.1f}x over eager is over {SUSPICIOUS_SPEEDUP:g}x: extra trials ran"
        timing.message = "; ".join(filter(None, [timing.message, note]))

    # ----------------------------------------------------------------- main

    def execute(self) -> Verdict:
        try:
            return self._execute()
        except Stop as stop:
            return stop.verdict
        except BaseException as exc:  # noqa: BLE001
            # Out of memory or a fault outside the places that expect one: still the job's verdict.
            if _is_oom(exc) or _is_cuda_fault(exc):
                return self.fail_from(exc, self.doing)
            raise
        finally:
            self.finish_memory()

    def _execute(self) -> Verdict:
        self.setup_device()
        ref = self.load_reference()
        self.plan_memory(ref)  # before the candidate is even imported: a load_inline build can take a minute
        cand = self.load_candidate()
        self.check_signature(ref, cand)
        with torch.no_grad():
            with self.memory.phase("trials"):
                self.doing = "building the models"
                self.ctx.progress("checking", "building the models", 12)
                ref_model, cand_model = self.build(ref, cand)
                correctness = self.correctness(ref, cand, ref_model, cand_model)
            if correctness.status == "unverifiable":
                return self.verdict(VerdictStatus.UNVERIFIABLE, "unverifiable: " + correctness.message,
                                    correctness=correctness)
            self.settle(correctness)
            with self.memory.phase("dynamic"):
                self.dynamic_checks(ref, cand_model)
            correct = correctness.status == "passed"
            self.measure_accuracy(ref, ref_model, cand_model, correct and not self.flags)
            with self.memory.phase("timing"):
                timing = self.timing(ref, ref_model, cand_model, correct and not self.flags)
                if timing.speedup_vs_eager and timing.speedup_vs_eager > SUSPICIOUS_SPEEDUP:
                    self.scrutiny(ref, ref_model, cand_model, timing)
                    failed = [t for t in self.trials if not t.passed]
                    if failed:
                        correctness.status = "failed"
                        correctness.message = f"extra scrutiny failed: {failed[0].name}: {failed[0].detail}"
                        correct = False
            # Last: the reference itself may fault at a shape its author never ran, and a fault
            # ends all GPU work in this process; what came before stands.
            self.check_second_shape(ref, cand)
            if self.settle(correctness).status != "passed":
                correct = False
        return self.finish(correctness, timing, correct)

    def finish_memory(self) -> None:
        """Nothing of this job stays in the worker: its modules go, the allocator's cache is emptied."""
        for name in [m for m in sys.modules if m.startswith(("_stitch_reference_", "_stitch_candidate_"))]:
            sys.modules.pop(name, None)
        # The compiled reference is kept for the next job on the same reference (a Coder's next
        # round) only while it is small; what it holds is declared, so the worker's leftover
        # check allows exactly that much.
        cache = self.ctx.state.get("compiled") or {}
        kept = sum(_state_bytes(model) for model, _ in cache.values())
        if kept > KEEP_COMPILED_BYTES:
            cache.clear()
            kept = 0
        self.ctx.state["kept_cuda_bytes"] = kept
        if self.memory.cuda and self.plan.status != "too_large":
            try:
                self.memory.record("")
            except Exception:  # noqa: BLE001 - a poisoned context: the worker is retired anyway
                pass

    def finish(self, correctness: Correctness, timing: Timing, correct: bool) -> Verdict:
        self.refresh_compile()
        checks = _count(self.trials)
        if self.flags:
            status = VerdictStatus.HACKING
            summary = f"hacking: {self.flags[0].message}"
        elif not correct:
            status = VerdictStatus.INCORRECT
            summary = "incorrect: " + correctness.message
        else:
            status = VerdictStatus.CORRECT
            speed = ""
            if timing.speedup_vs_eager is not None:
                speed = f"; {_ratio(timing.speedup_vs_eager, timing.speedup_vs_eager_ci)} vs eager"
                if timing.speedup_vs_compile is not None:
                    speed += (f", {_ratio(timing.speedup_vs_compile, timing.speedup_vs_compile_ci)} vs torch.compile"
                              f" ({timing.compile_mode})")
                speed += " (GPU time)"
            summary = f"correct: {checks}{speed}"
            if self.accuracy.less_accurate and self.accuracy.ratio is not None:
                summary += f"; {self.accuracy.ratio:.1f}x eager's error against float64"
            if self.not_checked:
                summary += f" ({len(self.not_checked)} check(s) not run: see not_checked)"
        if self.cpu:
            summary += " [CPU test mode]"
        return self.verdict(status, summary, correctness=correctness, timing=timing)


def _ratio(value: float, ci: list[float] | None) -> str:
    if not ci:
        return f"{value:.2f}x"
    return f"{value:.2f}x ±{max(ci[1] - value, value - ci[0], 0.0):.2f}"


def _state_bytes(model: Any) -> int:
    if not isinstance(model, torch.nn.Module):
        return 0
    return sum(t.numel() * t.element_size() for t in model.state_dict().values() if t.is_cuda)


def _count(trials: list[Trial]) -> str:
    kinds: dict[str, int] = {}
    for t in trials:
        kinds[t.kind] = kinds.get(t.kind, 0) + 1
    return ", ".join(f"{n} {k}" for k, n in kinds.items()) + " check(s) passed"


def handle(payload: Any, ctx: Any) -> Verdict:
    job = from_dict(payload, VerifyJob)
    return VerifyRun(job, ctx).execute()
