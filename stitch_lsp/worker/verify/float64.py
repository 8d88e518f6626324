"""What a verify run judges against a float64 run of the reference: a failed trial again (eager's own error
may show), small outputs that may still be signal, and the candidate's accuracy beside eager's."""

from __future__ import annotations

from typing import Any, Callable

import torch

from stitch_lsp.contract import memory_plan as mp
from stitch_lsp.verdict import Accuracy, Float64Judgement, Trial
from stitch_lsp.worker.verify import accuracy as acc
from stitch_lsp.worker.verify.compare import compare, tensors
from stitch_lsp.worker.verify.failures import Stop, is_cuda_fault, short
from stitch_lsp.worker.verify.state import RunState

# A trial that fails against eager is judged against float64: each value may be off by the tolerance
# plus this many times eager's own error there (eager is no exact answer where an epilogue cancels).
EAGER_ERROR_MULTIPLE = 2.0
# Small outputs are compared at a scaled tolerance when the reference's float32 run is this close
# to its float64 run, relative to its largest output: the values carry signal, not rounding noise.
SMALL_OUTPUT_AGREEMENT = 1e-3
# In a coarser dtype, this many units of its rounding (bf16: 3% of the largest output, fp16: 0.4%): a bf16
# L2 norm's values carry their signal to bf16's own precision; rounding noise around 0 is off by about 100%.
SMALL_OUTPUT_ROUNDING_UNITS = 4


class Float64(RunState):
    """``VerifyRun``'s judgements against float64 (a mixin of ``RunState``)."""

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
            if is_cuda_fault(exc):
                raise
            again, why = None, short(exc, 200)  # out of memory (the plan erred): the judgement stands
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

    def small_but_exact(self, ref: Any, ref_model: Any, seed: int, atol: float) -> bool:
        """Outputs all under the tolerance can still be signal (x / ||x|| over a huge tensor is ~1e-5
        everywhere): when the reference agrees with its float64 run to SMALL_OUTPUT_AGREEMENT of its
        largest value, the outputs are compared at ``atol`` scaled by that value (as if normalised to 1);
        when it does not (a mean of normalised values: rounding noise around 0), nothing can be proven."""
        peak = max((p for p, _ in self.ref_seen), default=0.0)
        if not 0.0 < peak <= atol or self.same_for_every_seed() or not mp.runs(self.plan, "rejudge"):
            return False
        self.ctx.progress("checking", "small outputs: the reference against float64", 40)
        doing, self.doing = self.doing, "checking the reference's small outputs against float64"
        try:
            with self.memory.within("rejudge"):
                make = self.drawer(ref, seed)
                ref_out = ref_model(*make())
                agreement = _agreement(ref_out)
                out64, _ = acc.float64_outputs(ref_model, make, self.sync)
                gap = None if out64 is None else compare(ref_out, ref_out, 0.0, atol, max(1, self.chunk // 2),
                                                         ref64=out64).eager_max_abs
                del ref_out, out64
        except Stop:
            raise
        except BaseException as exc:  # noqa: BLE001
            if is_cuda_fault(exc):
                raise
            self.memory.release()
            return False
        finally:
            self.doing = doing
        if gap is None or gap > agreement * peak:
            return False
        self.atol_override = atol * peak
        self.events.append(f"every output is under the tolerance (max |out| {peak:.3g} <= atol {atol:.3g}) but the "
                           f"reference agrees with float64 to {gap:.3g}: compared at atol {self.atol_override:.3g} "
                           "(atol x max |out|)")
        return True

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
            if is_cuda_fault(exc):
                raise
            # Out of memory here (the plan erred) or the float64 run failing: the figure is missing, nothing more.
            self.accuracy = Accuracy(status="error", seed=self.first_seed,
                                     message=f"not measured: {short(exc, 240)}")
            self.memory.release()


def _agreement(out: Any) -> float:
    """How close to float64, relative to the largest output, the reference must be for its small outputs to
    count as signal: SMALL_OUTPUT_AGREEMENT, or a few units of a coarser dtype's rounding."""
    first = next((t for t in tensors(out) if t.is_floating_point()), None)
    if first is None:
        return SMALL_OUTPUT_AGREEMENT
    return max(SMALL_OUTPUT_AGREEMENT, SMALL_OUTPUT_ROUNDING_UNITS * torch.finfo(first.dtype).eps)
