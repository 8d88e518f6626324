"""What a verify run knows as it goes (its device, findings, trials, memory plan) and the helpers every
phase uses: the verdict it would give now, a verdict for an exception, drawing the reference's inputs."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any, Callable

import torch

from stitch_lsp.contract import memory_plan as mp
from stitch_lsp.contract.verify import VerifyJob, VerifyOptions
from stitch_lsp.verdict import (
    Accuracy,
    CompileResult,
    Correctness,
    DeviceInfo,
    HackFlag,
    MemoryPlan,
    StreamCheck,
    Trial,
    Verdict,
    VerdictStatus,
)
from stitch_lsp.worker import inputs as inp
from stitch_lsp.worker.memory_phases import PhaseMemory
from stitch_lsp.worker.modules import compile_failure, is_compile_error
from stitch_lsp.worker.verify.compare import same_fingerprint
from stitch_lsp.worker.verify.failures import Stop, is_cuda_fault, is_oom, short, where


def random_seed() -> int:
    return int.from_bytes(os.urandom(4), "little") & 0x7FFFFFFF


class RunState:
    """The state of one ``VerifyRun`` and what its phases share; each phase is a mixin of this class."""

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
        if is_oom(exc):
            self.ctx.retire("out of memory")
            planned = ""
            if self.plan.status == "planned":
                planned = (f" (the memory plan allowed {mp.gib(self.plan.budget_bytes)} GiB of "
                           f"{mp.gib(self.plan.free_bytes)} GiB free)")
            return self.verdict(VerdictStatus.OUT_OF_MEMORY,
                                f"out of memory while {doing}{planned}: {short(exc, 300)}")
        if is_cuda_fault(exc):
            self.ctx.retire("CUDA context poisoned by a fault")
            return self.verdict(VerdictStatus.CRASHED, f"the kernel faulted while {doing}: {short(exc, 300)}")
        return self.verdict(VerdictStatus.BAD_INPUT, f"{doing} raised {short(exc)}{where(exc, self.job.candidate_path)}")

    def sync(self) -> None:
        if not self.cpu:
            torch.cuda.synchronize()

    def flag(self, code: str, message: str, *, evidence: str = "", dynamic: bool = True) -> None:
        if not any(f.code == code for f in self.flags):
            self.flags.append(HackFlag(code=code, message=message, evidence=evidence, dynamic=dynamic))

    @property
    def atol(self) -> float | None:
        return self.opts.atol if self.atol_override is None else self.atol_override

    def same_for_every_seed(self) -> bool:
        """The reference's output was the same for every seed drawn so far (by fingerprint)."""
        prints = [fp for _, fp in self.ref_seen]
        return len(prints) > 1 and all(same_fingerprint(prints[0], fp) for fp in prints[1:])

    def draw(self, ref: Any, seed: int) -> list[Any]:
        try:
            return inp.draw(ref, seed, self.device)
        except BaseException as exc:  # noqa: BLE001
            if is_oom(exc):
                raise Stop(self.fail_from(exc, "drawing the inputs"))
            raise Stop(self.verdict(VerdictStatus.BAD_INPUT, f"the reference's get_inputs() raised: {short(exc)}"))

    def drawer(self, ref: Any, seed: int, case: str = "") -> Callable[[], list[Any]]:
        """Draws the same inputs each time it is called (seeded), adversarial values planted."""
        if case:
            return lambda: inp.adversarial(self.draw(ref, seed), case, seed, self.chunk)
        return lambda: self.draw(ref, seed)


def copy_state(state: dict[str, Any], model: Any) -> tuple[int, list[str]]:
    """``state``'s tensors copied by name into ``model``'s where the shapes agree (in place: on its device, in its
    dtype); how many were copied, and the names of ``model``'s left as they were."""
    copied, skipped = 0, []
    with torch.no_grad():
        for name, value in model.state_dict().items():
            src = state.get(name)
            if src is not None and src.shape == value.shape:
                value.copy_(src)
                copied += 1
            else:
                skipped.append(name)
    return copied, skipped
