"""The worker's request loop (``python -m stitch_lsp.worker``)."""

from __future__ import annotations

import gc
import importlib
import os
import sys
import traceback
from pathlib import Path
from typing import Any, BinaryIO, Callable

from stitch_lsp.serde import to_dict
from stitch_lsp.contract.frames import Frame, Progress, ProtocolError, Reply, read_frame, write_frame
from stitch_lsp.worker.handlers import HANDLERS

# Device memory a finished job may leave allocated without costing the worker: cuBLAS
# workspaces and the like. Caches a handler keeps on purpose are declared in
# ``ctx.state["kept_cuda_bytes"]`` and allowed on top.
LEFTOVER_SLACK_BYTES = 256 << 20


class WorkerContext:
    """What a handler gets besides its payload."""

    def __init__(self, out: BinaryIO, workdir: Path) -> None:
        self._out = out
        self.workdir = workdir
        # Handler-owned state that survives between jobs of this worker (caches, loaded tools).
        self.state: dict[str, Any] = {}
        self.retire_reason = ""
        self.job_id = ""

    def progress(self, stage: str, message: str = "", percent: int | None = None) -> None:
        write_frame(self._out, Frame(progress=Progress(stage=stage, message=message, percent=percent)))

    def retire(self, reason: str) -> None:
        if not self.retire_reason:
            self.retire_reason = reason


def _resolve(kind: str) -> Callable[[Any, WorkerContext], Any]:
    module_name = HANDLERS.get(kind)
    if module_name is None:
        raise KeyError(kind)
    module = importlib.import_module(module_name)
    handler = getattr(module, f"handle_{kind}", None) or getattr(module, "handle")
    return handler


def _take_protocol_streams() -> tuple[BinaryIO, BinaryIO]:
    """Keep fds 0/1 for frames and point the standard streams elsewhere.

    User code that prints (or a C extension writing to fd 1) then lands on stderr,
    which the parent keeps as the worker's log.
    """
    proto_in = os.fdopen(os.dup(0), "rb", buffering=0)
    proto_out = os.fdopen(os.dup(1), "wb")
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    os.dup2(2, 1)
    sys.stdin = open(os.devnull)
    sys.stdout = sys.stderr
    return proto_in, proto_out


def serve(proto_in: BinaryIO, proto_out: BinaryIO, workdir: Path) -> int:
    ctx = WorkerContext(proto_out, workdir)
    while True:
        try:
            frame = read_frame(proto_in)
        except ProtocolError:
            return 0  # parent closed the pipe: a normal shutdown
        request = frame.request
        if request is None:
            write_frame(proto_out, Frame(reply=Reply(ok=False, error="bad_request", message="expected a request")))
            continue
        ctx.retire_reason = ""
        ctx.job_id = request.job_id
        try:
            handler = _resolve(request.kind)
        except KeyError:
            reply = Reply(ok=False, error="unknown_kind", message=f"no handler for request kind {request.kind!r}")
        except Exception as exc:  # an import error in a handler module is a bug, reported as such
            reply = Reply(ok=False, error="handler_error", message=f"{type(exc).__name__}: {exc}",
                          traceback=traceback.format_exc())
        else:
            try:
                result = handler(request.payload, ctx)
                reply = Reply(ok=True, payload=to_dict(result))
            except MemoryError as exc:
                reply = Reply(ok=False, error="out_of_memory", message=f"MemoryError: {exc}",
                              traceback=traceback.format_exc())
                ctx.retire("host out of memory")
            except Exception as exc:
                reply = Reply(ok=False, error="handler_error", message=f"{type(exc).__name__}: {exc}",
                              traceback=traceback.format_exc())
                # Whatever the handler left half done (tensors held by its frames, a patched
                # module, a poisoned context) must not reach the next job.
                ctx.retire(f"the handler raised {type(exc).__name__}")
            leftover = _leftover(ctx)
            if leftover:
                ctx.retire(leftover)
        reply.retire = bool(ctx.retire_reason)
        reply.retire_reason = ctx.retire_reason
        write_frame(proto_out, Frame(reply=reply))
        if reply.retire:
            return 0


def _leftover(ctx: WorkerContext) -> str:
    """Why this worker must not take another job (device memory the job left behind), or ""."""
    torch = sys.modules.get("torch")
    if torch is None or ctx.retire_reason:
        return ""
    try:
        if not torch.cuda.is_initialized():
            return ""
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        held = torch.cuda.memory_allocated()
        kept = int(ctx.state.get("kept_cuda_bytes", 0))
        if held > kept + LEFTOVER_SLACK_BYTES:
            gc.collect()  # a job's modules hold their globals in reference cycles
            torch.cuda.empty_cache()
            held = torch.cuda.memory_allocated()
    except Exception as exc:  # noqa: BLE001 - a context a fault left unusable
        return f"the CUDA context is unusable after the job ({type(exc).__name__})"
    if held > kept + LEFTOVER_SLACK_BYTES:
        return f"{held / (1 << 30):.2f} GiB of device memory still allocated after the job"
    return ""


def main() -> int:
    proto_in, proto_out = _take_protocol_streams()
    if os.environ.get("STITCH_WORKER_PRELOAD") == "torch":
        # Paid once per worker, before the first job arrives.
        try:
            import torch  # noqa: F401
        except ImportError:
            pass  # the handlers say "torch is not installed" with the job's verdict
    workdir = Path(os.environ.get("STITCH_WORKER_DIR") or os.getcwd())
    return serve(proto_in, proto_out, workdir)
