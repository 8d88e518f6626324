"""Dynamic anti-hacking: PyTorch compute ops raise inside ``ModelNew.forward``; threads and
streams are watched.

Glue stays allowed: allocation (empty, zeros, full...), views and reshapes, copies and
dtype conversions, metadata. Anything else reaching the dispatcher during the
candidate's forward (from Python or from a C++ extension) raises ``ForbiddenTorchOp``
and is recorded even if the candidate catches it.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any, Callable

import torch
from torch.utils._python_dispatch import TorchDispatchMode

GLUE_OPS = frozenset(
    """
    empty empty_like empty_strided new_empty new_empty_strided empty_permuted
    zeros zeros_like ones ones_like full full_like new_zeros new_ones new_full fill_ zero_ scalar_tensor arange
    lift_fresh lift_fresh_copy detach detach_ alias _unsafe_view view view_as reshape reshape_as _reshape_alias
    as_strided as_strided_ expand expand_as permute transpose transpose_ t t_ squeeze squeeze_ unsqueeze unsqueeze_
    flatten unflatten unfold slice select split split_with_sizes chunk narrow unbind movedim view_as_real view_as_complex
    clone copy_ _copy_from _copy_from_and_resize _to_copy to contiguous resize_ set_ _local_scalar_dense
    sym_size sym_stride sym_numel sym_storage_offset is_contiguous is_same_size record_stream
    _has_compatible_shallow_copy_type _nested_tensor_from_mask result_type
    """.split()
)


class ForbiddenTorchOp(RuntimeError):
    pass


@dataclass
class GuardReport:
    torch_ops: list[str] = field(default_factory=list)  # forbidden ops the candidate reached
    allowed_torch_ops: list[str] = field(default_factory=list)  # declared as left in PyTorch
    threads_started: list[str] = field(default_factory=list)
    threads_alive_after: list[str] = field(default_factory=list)
    side_stream_launches: list[str] = field(default_factory=list)
    streams_created: int = 0
    stream_switched: bool = False


def _op_name(func: Any) -> str:
    name = getattr(func, "__name__", str(func))  # "add.Tensor"
    return name.split(".")[0]


class _ComputeGuard(TorchDispatchMode):
    def __init__(self, report: GuardReport, allowed: set[str]) -> None:
        super().__init__()
        self.report = report
        self.allowed = allowed

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        base = _op_name(func)
        if base in GLUE_OPS:
            return func(*args, **(kwargs or {}))
        name = f"aten.{base}"
        if base in self.allowed or name in self.allowed:
            if name not in self.report.allowed_torch_ops:
                self.report.allowed_torch_ops.append(name)
            return func(*args, **(kwargs or {}))
        if name not in self.report.torch_ops:
            self.report.torch_ops.append(name)
        raise ForbiddenTorchOp(f"{name} called inside ModelNew.forward")


def _normalise_allowed(ops: list[str]) -> set[str]:
    out = set()
    for op in ops:
        op = op.strip()
        for prefix in ("aten.", "torch.", "F.", "torch.nn.functional."):
            if op.startswith(prefix):
                op = op[len(prefix):]
        out.add(op.split(".")[0])
    return out


def guarded_call(fn: Callable[[], Any], allowed_ops: list[str], *, cuda: bool) -> tuple[Any, BaseException | None, GuardReport]:
    """Run ``fn`` (the candidate's forward) under every dynamic check."""
    report = GuardReport()
    before = set(threading.enumerate())
    original_start = threading.Thread.start

    def recording_start(self, *a, **k):  # type: ignore[no-untyped-def]
        report.threads_started.append(self.name)
        return original_start(self, *a, **k)

    observers: list[Any] = []
    stream_before = None
    if cuda:
        stream_before = torch.cuda.current_stream().cuda_stream
        current = stream_before
        try:
            from stitch_lsp.runtime import loader

            def observe(name: str, handle: int) -> None:
                if handle != current:
                    report.side_stream_launches.append(name)

            observers.append(loader.add_launch_observer(observe))
        except ImportError:
            pass
    stream_cls = torch.cuda.Stream
    own_new = stream_cls.__dict__.get("__new__")
    inherited_new = stream_cls.__new__

    def recording_stream_new(cls, *a, **k):  # type: ignore[no-untyped-def]
        # torch.cuda.current_stream() wraps an existing stream (stream_id=...): not a new one.
        if "stream_id" not in k:
            report.streams_created += 1
        return inherited_new(cls, *a, **k)

    threading.Thread.start = recording_start  # type: ignore[method-assign]
    stream_cls.__new__ = staticmethod(recording_stream_new)  # type: ignore[method-assign,assignment]
    result, error = None, None
    try:
        with _ComputeGuard(report, _normalise_allowed(allowed_ops)):
            result = fn()
    except BaseException as exc:  # noqa: BLE001 - the candidate's failure is data here
        error = exc
    finally:
        threading.Thread.start = original_start  # type: ignore[method-assign]
        if own_new is not None:
            stream_cls.__new__ = own_new  # type: ignore[method-assign]
        else:
            del stream_cls.__new__
        for remove in observers:
            remove()
    if cuda and stream_before is not None and torch.cuda.current_stream().cuda_stream != stream_before:
        report.stream_switched = True
    report.threads_alive_after = [t.name for t in threading.enumerate() if t not in before and t.is_alive()]
    return result, error, report
