"""The reply: the verdict's status and one-line summary from what the run found."""

from __future__ import annotations

from stitch_lsp.verdict import Correctness, Timing, Trial, Verdict, VerdictStatus
from stitch_lsp.worker.verify.loading import Loading


class Reply(Loading):
    """``VerifyRun``'s last step (a mixin: the compile record is refreshed for kernels loaded late)."""

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


def _count(trials: list[Trial]) -> str:
    kinds: dict[str, int] = {}
    for t in trials:
        kinds[t.kind] = kinds.get(t.kind, 0) + 1
    return ", ".join(f"{n} {k}" for k, n in kinds.items()) + " check(s) passed"
