"""The timing phase: eager, the torch.compile baseline and the candidate interleaved, and the extra scrutiny
a suspicious speedup gets."""

from __future__ import annotations

import hashlib
import statistics
from pathlib import Path
from typing import Any

import torch

from stitch_lsp.contract import memory_plan as mp
from stitch_lsp.contract.intervals import TARGET_REL_HALF_WIDTH, median_interval, round_ratios
from stitch_lsp.verdict import Timing, TimingStats, Trial
from stitch_lsp.worker import gpu_state
from stitch_lsp.worker.timing import LAUNCH_QUEUED, hidden_work, run_interleaved, stats
from stitch_lsp.worker.verify.compare import fingerprint, same_fingerprint
from stitch_lsp.worker.verify.failures import Stop, is_cuda_fault, short
from stitch_lsp.worker.verify.state import random_seed
from stitch_lsp.worker.verify.trials import Trials

SUSPICIOUS_SPEEDUP = 10.0


class TimingPhase(Trials):
    """``VerifyRun``'s timing (a mixin: the extra scrutiny runs more trials)."""

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
        sets = [self.draw(ref, random_seed()) for _ in range(n_sets)]
        message = []
        if planned is not None and planned.note:
            message.append(f"memory plan: {planned.note}")
        contenders = self.contenders(ref_model, cand_model, sets, message)
        self.ctx.progress("timing", "interleaved rounds", 80)
        clocks = [gpu_state.snapshot(torch.cuda.current_device())] if not self.cpu else []
        run = self.interleave(contenders, sets, message)
        if not self.cpu:
            clocks.append(gpu_state.snapshot(torch.cuda.current_device()))
        timing = self.timing_figures(run, "compiled" in contenders)
        if not self.cpu:
            self.gpu_timing_method(timing, run, clocks, len(sets), message)
        else:
            timing.method = (f"CPU test mode: host clock, {run.rounds} interleaved rounds, inputs rotated among "
                             f"{len(sets)} sets; {run.stop_reason}")
        if not timing.converged and timing.speedup_vs_eager is not None:
            message.append(f"not converged: {run.stop_reason}; the intervals say how far the ratios may be off")
        timing.message = "; ".join(message)
        return timing

    def contenders(self, ref_model: Any, cand_model: Any, sets: list[list[Any]], message: list[str]) -> dict[str, Any]:
        """Eager, the torch.compile baseline where it runs (compiled and warmed on the first input set), the
        candidate: in this order. Why the baseline is missing goes into ``message``."""
        contenders: dict[str, Any] = {"eager": lambda a: ref_model(*a)}
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
        return contenders

    def interleave(self, contenders: dict[str, Any], sets: list[list[Any]], message: list[str]) -> Any:
        """The interleaved rounds. A torch.compile baseline that fails while timed is dropped (with all but the
        first input set, to give back its memory) and the rest timed again; ``contenders`` and ``sets`` say
        what was timed."""
        pairs = [("eager", "candidate"), ("compiled", "candidate")]
        try:
            return run_interleaved(contenders, sets, cuda=not self.cpu, budget_s=self.opts.timing_budget_s,
                                   pairs=pairs)
        except Stop:
            raise
        except BaseException as exc:  # noqa: BLE001
            if "compiled" in contenders and "candidate" not in str(exc) and not is_cuda_fault(exc):
                contenders.pop("compiled")
                message.append(f"torch.compile failed while timing: {short(exc, 200)}")
                self.ctx.state.pop("compiled", None)
                del sets[1:]
                self.memory.release()
                return run_interleaved(contenders, sets, cuda=not self.cpu, budget_s=self.opts.timing_budget_s,
                                       pairs=pairs)
            raise Stop(self.fail_from(exc, "timing the candidate"))

    def gpu_timing_method(self, timing: Timing, run: Any, clocks: list[Any], n_sets: int, message: list[str]) -> None:
        """On the GPU: the clocks' notes, work hidden from the timer (flagged), and how the figures were taken."""
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
                         f"{n_sets} set(s), contenders interleaved over {run.rounds} rounds of "
                         f"{run.calls_per_round} call(s); {run.stop_reason}; call latency: host clock around one "
                         f"synchronised call per round; {covered}{text}")
        if timing.clocks.flagged:
            message.extend(timing.clocks.notes)

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
            return f"torch.compile failed: {short(exc, 200)}"
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
            if is_cuda_fault(exc):
                raise
            self.ctx.state.pop("compiled", None)
            self.memory.release()
            return f"torch.compile failed: {short(exc, 200)}"
        return compiled

    def scrutiny(self, ref: Any, ref_model: Any, cand_model: Any, timing: Timing) -> None:
        """Over 10x: more seeds, a determinism check, and a device-wide host-clock timing."""
        timing.suspicious = True
        self.ctx.progress("checking", "extra scrutiny (speedup over 10x)", 90)
        self.doing = "running the extra scrutiny"
        for k in range(5):
            seed = random_seed()
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
