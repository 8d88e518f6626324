"""The dynamic anti-hacking checks: one guarded forward (PyTorch compute, threads, streams) and one forward
under the profiler (every kernel's stream)."""

from __future__ import annotations

from typing import Any

from stitch_lsp.verdict import StreamCheck
from stitch_lsp.worker.guards import ForbiddenTorchOp, guarded_call
from stitch_lsp.worker.stream_check import profile_call
from stitch_lsp.worker.verify.failures import short
from stitch_lsp.worker.verify.state import RunState, random_seed


class DynamicChecks(RunState):
    """``VerifyRun``'s anti-hacking checks (a mixin of ``RunState``)."""

    def dynamic_checks(self, ref: Any, cand_model: Any) -> None:
        self.ctx.progress("checking", "anti-hacking", 70)
        self.doing = "running the anti-hacking checks"
        args = self.draw(ref, random_seed())
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
            self.events.append(f"the guarded forward raised {short(error, 200)}")
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
        args = self.draw(ref, random_seed())
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
