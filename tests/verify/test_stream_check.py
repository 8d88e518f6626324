"""The stream check on profiler records (synthetic, no GPU): side-stream work is joined back to the
caller's stream or flagged, however short it is; static "uses streams" flags are settled by it."""

from __future__ import annotations

from stitch_lsp.verdict import HackFlag, StreamCheck, Verdict, VerdictStatus
from stitch_lsp.verify.anti_hacking import settled_by_run, static_flags
from stitch_lsp.worker.stream_check import FORWARD_RANGE, LAUNCH_MARK, MARKER_NAME, Activity, analyse

CALLER, SIDE = 7, 13


class Trace:
    """A forward between two marker kernels: host calls 100..900 ns, device work in its own clock."""

    def __init__(self, forward_end: int = 900) -> None:
        self.acts = [Activity("range", FORWARD_RANGE, 100, forward_end)]
        self.next_id = 1
        self.launch("cudaLaunchKernel", 50, MARKER_NAME, CALLER, 10_000, 10_010)
        self.after_at = forward_end + 50

    def launch(self, api: str, at: int, kernel: str, stream: int, start: int, end: int, correlated: bool = True):
        corr = self.next_id if correlated else 0
        self.next_id += 1
        if correlated:
            self.acts.append(Activity("runtime", api, at, at + 5, correlation=corr))
        self.acts.append(Activity("kernel", kernel, start, end, stream=stream, correlation=corr))

    def wait(self, at: int, api: str = "cudaStreamWaitEvent") -> None:
        self.acts.append(Activity("runtime", api, at, at + 2))

    def done(self, after_start: int) -> StreamCheck:
        self.launch("cudaLaunchKernel", self.after_at, MARKER_NAME, CALLER, after_start, after_start + 10)
        return analyse(self.acts)


def test_all_on_the_callers_stream():
    t = Trace()
    t.launch("cuLaunchKernel", 200, "relu", CALLER, 10_100, 12_000)
    check = t.done(12_010)
    assert check.status == "checked" and check.current_stream == CALLER
    assert [k.name for k in check.kernels] == ["relu"] and not check.unjoined
    assert check.span_us == 1.9


def test_a_short_unjoined_side_kernel_is_caught_though_it_ended_long_before():
    t = Trace()
    t.wait(150)  # the side stream waited for the inputs: before the launch, so no join
    t.launch("cuLaunchKernel", 200, "relu", SIDE, 10_100, 10_102)
    check = t.done(50_000)
    assert [k.name for k in check.unjoined] == ["relu"]
    assert "not joined back" in check.message


def test_a_side_kernel_joined_with_an_event_passes():
    t = Trace()
    t.launch("cuLaunchKernel", 200, "half_a", CALLER, 10_100, 12_000)
    t.launch("cuLaunchKernel", 300, "half_b", SIDE, 10_200, 12_500)
    t.wait(400)
    check = t.done(12_510)
    assert not check.unjoined and check.streams == [CALLER, SIDE] and "joined back" in check.message


def test_a_wait_that_did_not_cover_the_kernel_is_no_join():
    # A wait after the launch, but the caller's stream went on before the side kernel ended.
    t = Trace()
    t.launch("cuLaunchKernel", 200, "relu", SIDE, 10_100, 90_000)
    t.wait(400)
    check = t.done(20_000)
    assert [k.name for k in check.unjoined] == ["relu"]


def test_a_host_synchronise_joins_everything():
    t = Trace()
    t.launch("cudaLaunchKernel", 200, "relu", SIDE, 10_100, 11_000)
    t.wait(300, api="cudaDeviceSynchronize")
    assert not t.done(11_010).unjoined


def test_launches_without_a_driver_record_are_placed_by_the_loaders_marks():
    t = Trace()
    t.wait(150)
    t.acts.append(Activity("mark", LAUNCH_MARK + "relu", 200, 200))
    t.launch("", 0, "relu", SIDE, 10_100, 10_102, correlated=False)
    assert [k.name for k in t.done(50_000).unjoined] == ["relu"]
    t = Trace()
    t.acts.append(Activity("mark", LAUNCH_MARK + "relu", 200, 200))
    t.launch("", 0, "relu", SIDE, 10_100, 10_102, correlated=False)
    t.wait(300)
    assert not t.done(50_000).unjoined


def test_no_kernels_or_no_markers_is_an_error_not_a_pass():
    assert analyse([Activity("range", FORWARD_RANGE, 0, 10)]).status == "error"
    assert analyse([]).status == "error"


HONEST_SIDE_STREAM = """
import torch
class ModelNew(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.side = torch.cuda.Stream()
    def forward(self, x):
        return x
"""


def test_static_stream_flags_are_settled_only_by_a_clean_stream_check():
    flags = static_flags(HONEST_SIDE_STREAM)
    assert [f.code for f in flags] == ["HACK004"] and flags[0].stream_use
    other = HackFlag(code="HACK005", message="threads")
    verdict = Verdict(status=VerdictStatus.CORRECT, summary="")
    assert settled_by_run(flags + [other], verdict) == flags + [other]  # not checked: stays
    verdict.streams = StreamCheck(status="checked", current_stream=CALLER)
    assert settled_by_run(flags + [other], verdict) == [other]
    t = Trace()
    t.launch("cuLaunchKernel", 200, "relu", SIDE, 10_100, 10_102)
    verdict.streams = t.done(50_000)
    assert settled_by_run(flags, verdict) == flags
