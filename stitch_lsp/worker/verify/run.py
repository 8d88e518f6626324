"""The ``verify`` request: compile, check and time one candidate against its reference.

Runs in the worker. Every failure a user can cause becomes a Verdict; only bugs
in this package raise. See DESIGN.md, "Verifier protocol", for what each check is for.
"""

from __future__ import annotations

import sys
from typing import Any

import torch

from stitch_lsp.serde import from_dict
from stitch_lsp.verdict import Verdict, VerdictStatus
from stitch_lsp.contract.verify import VerifyJob
from stitch_lsp.worker.verify.dynamic_checks import DynamicChecks
from stitch_lsp.worker.verify.failures import Stop, is_cuda_fault, is_oom
from stitch_lsp.worker.verify.reply import Reply
from stitch_lsp.worker.verify.second_shape import SecondShape
from stitch_lsp.worker.verify.timing_phase import SUSPICIOUS_SPEEDUP, TimingPhase

KEEP_COMPILED_BYTES = 1 << 30


class VerifyRun(SecondShape, DynamicChecks, TimingPhase, Reply):
    """One ``verify`` job, phase by phase: loading (``loading``), the trials (``trials``, ``float64``), the
    anti-hacking checks (``dynamic_checks``), accuracy, timing (``timing_phase``), the second shape
    (``second_shape``) and the reply (``reply``); what they share is ``state.RunState``."""

    def execute(self) -> Verdict:
        try:
            return self._execute()
        except Stop as stop:
            return stop.verdict
        except BaseException as exc:  # noqa: BLE001
            # Out of memory or a fault outside the places that expect one: still the job's verdict.
            if is_oom(exc) or is_cuda_fault(exc):
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


def _state_bytes(model: Any) -> int:
    if not isinstance(model, torch.nn.Module):
        return 0
    return sum(t.numel() * t.element_size() for t in model.state_dict().values() if t.is_cuda)


def handle(payload: Any, ctx: Any) -> Verdict:
    job = from_dict(payload, VerifyJob)
    return VerifyRun(job, ctx).execute()
