"""The second shape: the pair run again at other sizes of the reference's module-level constants, last of
all GPU work (the reference itself may fault at a shape its author never ran)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from stitch_lsp.contract import memory_plan as mp
from stitch_lsp.worker import inputs as inp
from stitch_lsp.worker.modules import is_compile_error
from stitch_lsp.worker.verify.failures import Stop, is_cuda_fault, is_oom, short
from stitch_lsp.worker.verify.loading import INIT_SEED, Loading
from stitch_lsp.worker.verify.state import random_seed
from stitch_lsp.worker.verify.trials import RAISED, Trials


class SecondShape(Trials, Loading):
    """``VerifyRun``'s second shape (a mixin: it runs a trial on models it builds as the loading phase does)."""

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
                    seed = random_seed()
                    make = lambda: inp.draw(ref, seed, self.device)  # noqa: E731 - raises here, not Stop
                    ref_model(*make())
                    self.sync()
                except Stop:
                    raise
                except BaseException as exc:  # noqa: BLE001
                    if is_cuda_fault(exc):
                        self.ctx.retire("CUDA context poisoned by a fault in the reference")
                        self.not_checked.append(
                            f"second shape ({', '.join(f'{k}={v}' for k, v in option.items())}): the reference itself "
                            f"faulted there ({short(exc, 160)}); the candidate is verified at the test shape only")
                        return
                    if is_oom(exc):
                        raise Stop(self.fail_from(exc, "running the reference at the second shape"))
                    errors.append(f"{', '.join(option)}: {short(exc, 100)}")
                    continue
                change = inp.ShapeChange({k: (sizes[k], v) for k, v in option.items()})
                try:
                    inp.seed_everything(INIT_SEED)
                    cand_model = self.to_device(cand.ModelNew(*init))
                except Stop:
                    raise
                except BaseException as exc:  # noqa: BLE001
                    if is_compile_error(exc) or is_oom(exc) or is_cuda_fault(exc):
                        raise Stop(self.fail_from(exc, "building ModelNew for the second shape"))
                    self.refused_shape(change, f"ModelNew(...) raised {short(exc)}")
                    return
                self.copy_weights(ref_model, cand_model)
                trial, _ = self.trial("odd-shape", "shape", ref_model, cand_model, make, True,
                                      detail=change.describe())
                if not trial.passed and RAISED in trial.detail:
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
