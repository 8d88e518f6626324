"""Which stream each kernel of ``ModelNew.forward`` ran on, and whether side streams were joined.

One forward runs under the PyTorch profiler (CUPTI activity records carry each
kernel's stream), between two marker kernels on the caller's current stream. A
kernel on another stream counts as joined back to the caller only when both hold:

- it ended before the marker after ``forward`` started (the caller's stream waited for it);
- after it was launched, and before ``forward`` returned, the host asked for a wait
  (``cudaStreamWaitEvent``, or a stream / event / device synchronise).

The second makes the check independent of the kernel's length: a short kernel on an
unjoined stream may well finish before the marker starts, but nothing waited for it.

``analyse`` works on plain ``Activity`` records and is tested without a GPU;
``profile_call`` turns one profiled call into those records.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable

from stitch_lsp.verdict import StreamCheck, StreamKernel

FORWARD_RANGE = "stitch::candidate_forward"
LAUNCH_MARK = "stitch::launch::"  # a zero-length range the loader's launch observer leaves before each launch
MARKER_CYCLES = 1000  # torch.cuda._sleep: a kernel of about a microsecond
MARKER_NAME = "spin_kernel"

# Host calls after which the caller's stream (or the host) has waited for earlier work.
_WAITS = re.compile(r"^(cudaStreamWaitEvent|cudaStreamSynchronize|cudaDeviceSynchronize|cudaEventSynchronize|"
                    r"cuStreamWaitEvent|cuStreamSynchronize|cuCtxSynchronize|cuEventSynchronize)")


@dataclass
class Activity:
    kind: str  # kernel | copy | runtime | range | mark
    name: str
    start_ns: int
    end_ns: int
    stream: int = -1  # device work only
    correlation: int = 0  # ties a kernel to the runtime / driver call that launched it


def analyse(acts: list[Activity]) -> StreamCheck:
    ranges = [a for a in acts if a.kind == "range" and a.name == FORWARD_RANGE]
    if not ranges:
        return StreamCheck(status="error", message="the profiler recorded no forward range")
    f0, f1 = ranges[0].start_ns, ranges[0].end_ns
    calls = [a for a in acts if a.kind == "runtime"]
    launched_by = {a.correlation: a for a in calls if a.correlation}
    device = sorted((a for a in acts if a.kind in ("kernel", "copy")), key=lambda a: a.start_ns)
    if not device:
        return StreamCheck(status="error", message="the profiler recorded no kernels (CUPTI unavailable?)")
    # Kernels the Stitch loader launched, where the driver call left no record: the n-th launch
    # mark of a name goes with the n-th kernel of that name.
    marks: dict[str, list[int]] = {}
    for a in sorted((a for a in acts if a.kind == "mark"), key=lambda a: a.start_ns):
        marks.setdefault(a.name[len(LAUNCH_MARK):], []).append(a.start_ns)
    marked: dict[int, int] = {}
    seen: dict[str, int] = {}
    for a in device:
        if a.correlation in launched_by or a.name not in marks:
            continue
        k = seen.get(a.name, 0)
        if k < len(marks[a.name]):
            marked[id(a)] = marks[a.name][k]
        seen[a.name] = k + 1

    def launch_time(a: Activity) -> int | None:
        call = launched_by.get(a.correlation)
        return call.start_ns if call is not None else marked.get(id(a))

    inside, outside = [], []
    for a in device:
        t = launch_time(a)
        if t is None:  # no launch record: tell the markers by name
            (outside if a.name == MARKER_NAME or MARKER_NAME in a.name else inside).append(a)
        else:
            (inside if f0 <= t <= f1 else outside).append(a)
    markers = [a for a in outside if MARKER_NAME in a.name] or outside
    if len(markers) < 2:
        return StreamCheck(status="error", message="the marker kernels around forward were not recorded")
    before, after = markers[0], markers[-1]
    current = before.stream
    check = StreamCheck(status="checked", current_stream=current)
    if after.stream != current:
        check.status = "error"
        check.message = "the markers around forward ran on different streams"
        return check
    waits = [c.start_ns for c in calls if _WAITS.match(c.name) and f0 <= c.start_ns <= f1]
    for a in inside:
        joined = True
        if a.stream != current:
            launched = launch_time(a)
            waited = any(w >= (launched if launched is not None else f0) for w in waits)
            joined = a.end_ns <= after.start_ns and waited
        check.kernels.append(StreamKernel(name=a.name, stream=a.stream, duration_us=(a.end_ns - a.start_ns) / 1e3,
                                          joined=joined))
    if inside:
        check.span_us = (max(a.end_ns for a in inside) - min(a.start_ns for a in inside)) / 1e3
    streams = check.streams
    unjoined = check.unjoined
    if unjoined:
        names = ", ".join(sorted({k.name[:60] for k in unjoined})[:3])
        check.message = (f"{len(unjoined)} kernel(s) ran on a stream other than the caller's and were not joined "
                         f"back before forward returned: {names}")
    elif any(s != current for s in streams):
        check.message = (f"{len(check.kernels)} kernel(s) on {len(streams)} stream(s), the side streams' work "
                         "joined back to the caller's stream before forward returned")
    else:
        check.message = f"{len(check.kernels)} kernel(s), all on the caller's stream"
    return check


# ------------------------------------------------------------------ the profiled call


_DEVICE_WORK = ("kernel", "gpu_memcpy", "gpu_memset", "concurrent_kernel")


def _kind(event: Any, device_type: Any) -> str:
    name = event.name()
    try:
        activity = str(event.activity_type() or "").lower()
    except Exception:  # older torch: no activity type; names decide
        activity = ""
    if event.device_type() == device_type.CUDA:
        # The GPU side of a record_function range, sync records: not work a kernel does.
        if name == FORWARD_RANGE or (activity and activity not in _DEVICE_WORK):
            return "other"
        return "copy" if ("Memcpy" in name or "Memset" in name or "memcpy" in activity or "memset" in activity) \
            else "kernel"
    if name == FORWARD_RANGE:
        return "range"
    if name.startswith(LAUNCH_MARK):
        return "mark"
    if "runtime" in activity or "driver" in activity or re.match(r"^cu(da)?[A-Z]", name):
        return "runtime"
    return "other"


def profile_call(fn: Callable[[], Any]) -> tuple[Any, BaseException | None, StreamCheck]:
    """Run ``fn`` once under the profiler, between marker kernels on the current stream."""
    import torch
    from torch.profiler import ProfilerActivity, profile, record_function

    from stitch_lsp.runtime import loader

    def mark(name: str, handle: int) -> None:
        with record_function(LAUNCH_MARK + name):
            pass

    result, error = None, None
    remove_mark = loader.add_launch_observer(mark)
    try:
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            torch.cuda._sleep(MARKER_CYCLES)
            with record_function(FORWARD_RANGE):
                try:
                    result = fn()
                except BaseException as exc:  # noqa: BLE001 - the candidate's failure is data here
                    error = exc
            torch.cuda._sleep(MARKER_CYCLES)
            torch.cuda.synchronize()
        acts = records(prof)
    except Exception as exc:  # noqa: BLE001 - a profiler that cannot run is a skipped check, not a verdict
        return result, error, StreamCheck(status="skipped", message=f"the profiler could not run: "
                                                                     f"{type(exc).__name__}: {exc}"[:300])
    finally:
        remove_mark()
    return result, error, analyse(acts)


def records(prof: Any) -> list[Activity]:
    """The profiler's records as Activities (device work, host calls, our ranges and marks)."""
    from torch.autograd import DeviceType

    acts = [Activity(kind=_kind(e, DeviceType), name=e.name(), start_ns=int(e.start_ns()), end_ns=int(e.end_ns()),
                     stream=int(e.device_resource_id()), correlation=int(e.correlation_id()))
            for e in prof.profiler.kineto_results.events()]
    return [a for a in acts if a.kind != "other"]
