"""The correctness trials: seeded random inputs, then adversarial values, each side on its own draw of the
same inputs, the candidate watched for late output and modified inputs."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from stitch_lsp.verdict import Correctness, Trial, VerdictStatus
from stitch_lsp.worker import inputs as inp
from stitch_lsp.worker.guards import ForbiddenTorchOp
from stitch_lsp.worker.modules import is_compile_error
from stitch_lsp.worker.poison import poison_cached_blocks
from stitch_lsp.worker.verify.compare import (compare, count_finite, fingerprint, peak_abs, same_fingerprint, tensors,
                                             tolerance, values_only)
from stitch_lsp.worker.verify.failures import Stop, is_cuda_fault, is_oom, short
from stitch_lsp.worker.verify.float64 import Float64
from stitch_lsp.worker.verify.state import copy_state, random_seed

MIN_TRIALS = 5
# An adversarial trial with finite inputs is judged only where the reference's output is finite (it can
# overflow its dtype); with less than this share of it finite, the trial is listed as not checked.
OVERFLOW_JUDGED_FRACTION = 0.01
RAISED = "ModelNew.forward raised"


@dataclass
class CandidateCall:
    """One call of ``ModelNew.forward`` in a trial, and what was seen around it."""

    out: Any = None
    error: BaseException | None = None
    ready: bool = True  # the output was complete on the caller's stream when forward returned
    final: tuple = ()  # the output's fingerprint after the device was synchronised
    mutated: list[int] = field(default_factory=list)  # inputs whose values changed


class Trials(Float64):
    """``VerifyRun``'s correctness trials (a mixin: a failed trial is judged again against float64)."""

    def run_reference(self, ref_model: Any, make: Callable[[], list[Any]]) -> Any:
        values = make()
        try:
            out = ref_model(*values)
        except Stop:
            raise
        except BaseException as exc:  # noqa: BLE001
            if is_oom(exc) or is_cuda_fault(exc):
                raise Stop(self.fail_from(exc, "running the reference"))
            raise Stop(self.verdict(VerdictStatus.BAD_INPUT, f"the reference raised on its own inputs: {short(exc)}"))
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
            if is_oom(exc) or is_cuda_fault(exc) or is_compile_error(exc):
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
                         detail=f"{prefix}{RAISED} {short(call.error)}"), ref_out
        result = compare(ref_out, call.out, self.opts.rtol, self.atol, self.chunk,
                         undefined_where_not_finite=overflow_left_out)
        late = not same_fingerprint(fingerprint(call.out, self.chunk), call.final)
        trial = Trial(name=name, kind=kind, passed=result.passed, max_abs_err=result.max_abs,
                      max_rel_err=result.max_rel, mismatches=result.mismatches,
                      detail=prefix + (result.detail or order), left_out=result.left_out)
        if result.left_out:
            trial.detail += (f"; {result.left_out} of {result.numel} output values not judged: the reference is "
                             "not finite there from finite inputs (it overflowed its dtype)")
        if not result.passed and kind in ("random", "adversarial", "shape") and not result.misplaced \
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

    def correctness(self, ref: Any, cand: Any, ref_model: Any, cand_model: Any) -> Correctness:
        n = max(MIN_TRIALS, self.opts.trials)
        seeds = [random_seed() for _ in range(n)]
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
        if why and self.same_for_every_seed() and self.weights_drawn_trials(ref, ref_model, cand_model, seeds):
            why = self.unverifiable_reason(atol)
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

    def random_trials(self, ref: Any, ref_model: Any, cand_model: Any, seeds: list[int],
                      draw_weights: bool = False) -> torch.Tensor | None:
        """The seeded trials; returns the first output tensor (its dtype sets the tolerance). ``draw_weights``:
        each seed also draws both models' weights anew (``weights_drawn_trials``)."""
        first: torch.Tensor | None = None
        also = ", weights drawn anew" if draw_weights else ""
        self.doing = "running the trials" + also
        for i, seed in enumerate(seeds):
            self.ctx.progress("checking", f"trial {i + 1} of {len(seeds)}{also}", 20 + int(30 * i / len(seeds)))
            if draw_weights:
                self.load_drawn_weights(ref, seed, (ref_model, cand_model))
            trial, ref_out = self.trial(f"{'weights' if draw_weights else 'seed'}-{seed}", "random", ref_model,
                                        cand_model, self.drawer(ref, seed), i % 2 == 0,
                                        detail=f"weights drawn with seed {seed}" if draw_weights else "")
            self.trials.append(trial)
            first = first if first is not None else next(iter(tensors(ref_out)), None)
            # What the unverifiable check needs, not the output itself (a 6 GiB output per seed).
            self.ref_seen.append((peak_abs(ref_out, self.chunk), fingerprint(ref_out, self.chunk)))
            del ref_out
        return first

    def weights_drawn_trials(self, ref: Any, ref_model: Any, cand_model: Any, seeds: list[int]) -> bool:
        """The reference's output is the same whatever its inputs (KernelBench has such tasks: a vision
        transformer whose class token never attends to the image), so the trials are run again with the
        models' weights drawn anew for each seed, into both models as the reference's constructor draws
        them: a candidate that hard-codes the output, or keeps weights it read once, still fails. False
        (the task stays unverifiable) where either side is not a module."""
        if not isinstance(ref_model, torch.nn.Module) or not isinstance(cand_model, torch.nn.Module):
            return False
        del self.trials[:], self.ref_seen[:]
        self.events.append("the reference's output is the same for every input drawn: each trial draws the "
                           "models' weights anew as well (the reference's constructor, seeded)")
        self.random_trials(ref, ref_model, cand_model, seeds, draw_weights=True)
        return True

    def load_drawn_weights(self, ref: Any, seed: int, models: tuple[Any, ...]) -> None:
        try:
            inp.seed_everything(seed)
            drawn = ref.Model(*list(ref.get_init_inputs())).state_dict()
        except BaseException as exc:  # noqa: BLE001
            raise Stop(self.fail_from(exc, "building the reference again to draw other weights"))
        for model in models:
            copy_state(drawn, model)

    @staticmethod
    def settle(correctness: Correctness) -> Correctness:
        """Status and message from the trials run so far."""
        trials = correctness.trials
        failed = [t for t in trials if not t.passed]
        correctness.status = "failed" if failed else "passed"
        correctness.message = (f"{len(failed)} of {len(trials)} checks failed; first: {failed[0].name}: "
                               f"{failed[0].detail}" if failed else f"{len(trials)} checks passed")
        return correctness

    def unverifiable_reason(self, atol: float) -> str:
        if not self.ref_seen:
            return ""
        peak = max(p for p, _ in self.ref_seen)
        if peak <= atol:
            return (f"the reference's output is near zero for every seed (max |out| = {peak:.3g} <= atol {atol:.3g}): "
                    "any kernel returning zeros would pass, so nothing is proven")
        if self.same_for_every_seed():
            return ("the reference's output is the same for every seed: it does not depend on the inputs, so a "
                    "kernel could hard-code it")
        return ""

    def adversarial(self, ref: Any, ref_model: Any, cand_model: Any) -> None:
        for j, case in enumerate(inp.ADVERSARIAL_CASES):
            self.ctx.progress("checking", f"adversarial: {case}", 45 + 3 * j)
            seed = random_seed()
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
                if is_oom(exc) or is_cuda_fault(exc):
                    raise Stop(self.fail_from(exc, "running the reference on adversarial inputs"))
                self.not_checked.append(f"adversarial-{case}: the reference raises on such inputs ({short(exc, 120)})")
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
