"""Parent side of the worker: spawn, send a job, wait with a deadline, kill the process tree.

The server imports this module, never ``stitch_lsp.worker``'s handlers (torch
lives there). One job at a time per pool: timing and profiling hold the GPU
exclusively (DESIGN.md, rule 5).
"""

from __future__ import annotations

import itertools
import os
import select
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, TypeVar

from stitch_lsp.cancellation import CancelToken, ProgressEvent, Reporter, no_report
from stitch_lsp.serde import from_dict, to_dict
from stitch_lsp.child_env import worker_env
from stitch_lsp.settings import Settings
from stitch_lsp.contract import WORKER
from stitch_lsp.contract.frames import Frame, FrameDecoder, ProtocolError, Reply, Request, encode

T = TypeVar("T")

REPO_ROOT = Path(__file__).resolve().parents[2]
_KEEP_LOGS = 8

_SIGNAL_WORDS = {
    signal.SIGSEGV: "segmentation fault",
    signal.SIGABRT: "aborted",
    signal.SIGBUS: "bus error",
    signal.SIGFPE: "floating-point exception",
    signal.SIGILL: "illegal instruction",
    signal.SIGKILL: "killed",
}


class WorkerDied(Exception):
    """The worker did not survive the job. ``reason``: crashed | timeout | out_of_memory | cancelled."""

    def __init__(self, reason: str, message: str, log_tail: str = "") -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message
        self.log_tail = log_tail


class WorkerError(Exception):
    """The handler raised (a bug, or a request it could not serve); the worker lives on."""

    def __init__(self, error: str, message: str, traceback: str = "") -> None:
        super().__init__(message)
        self.error = error
        self.message = message
        self.traceback = traceback


def describe_exit(returncode: int | None) -> str:
    if returncode is None:
        return "still running"
    if returncode < 0:
        sig = -returncode
        try:
            name = signal.Signals(sig).name
        except ValueError:
            name = f"signal {sig}"
        words = _SIGNAL_WORDS.get(sig)
        return f"{name} ({words})" if words else name
    return f"exit code {returncode}"


class WorkerProcess:
    """One child ``python -m stitch_lsp.worker``, in its own process group."""

    _ids = itertools.count(1)

    def __init__(self, python: str, workdir: Path, *, preload: str = "torch",
                 extra_env: dict[str, str] | None = None) -> None:
        self.workdir = workdir
        logs = workdir / "worker-logs"
        logs.mkdir(parents=True, exist_ok=True)
        self._prune_logs(logs)
        self.log_path = logs / f"worker-{int(time.time())}-{os.getpid()}-{next(self._ids)}.log"
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(
            [python, "-m", WORKER],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
            cwd=str(workdir),
            # Allowlisted (child_env): the worker runs user and generated code, and gets no secret.
            env=worker_env({**(extra_env or {}), "STITCH_WORKER_DIR": str(workdir), "STITCH_WORKER_PRELOAD": preload}),
            start_new_session=True,  # its own process group: killpg takes its children too
            close_fds=True,
        )
        self.started = time.monotonic()
        self.jobs = 0
        self._decoder = FrameDecoder()
        self._killed_for = ""

    @staticmethod
    def _prune_logs(logs: Path) -> None:
        old = sorted(logs.glob("worker-*.log"), key=lambda p: p.stat().st_mtime)
        for path in old[:-_KEEP_LOGS]:
            try:
                path.unlink()
            except OSError:
                pass

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self, why: str = "killed") -> None:
        """SIGKILL the whole process group (the worker and anything it started)."""
        if not self._killed_for:
            self._killed_for = why
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        self._close_pipes()

    def _close_pipes(self) -> None:
        for stream in (self.proc.stdin, self.proc.stdout):
            try:
                if stream:
                    stream.close()
            except OSError:
                pass
        try:
            self._log.close()
        except OSError:
            pass

    def close(self) -> None:
        """Polite shutdown: close its stdin, give it a moment, then kill the group."""
        try:
            if self.proc.stdin:
                self.proc.stdin.close()
            self.proc.wait(timeout=2)
        except (OSError, subprocess.TimeoutExpired):
            pass
        self.kill("closed")

    def log_tail(self, limit: int = 4000) -> str:
        try:
            data = self.log_path.read_bytes()
        except OSError:
            return ""
        return data[-limit:].decode(errors="replace")

    def call(self, request: Request, *, timeout_s: float, cancel: CancelToken | None, report: Reporter) -> Reply:
        self.jobs += 1
        unregister = cancel.on_cancel(lambda: self.kill("cancelled")) if cancel else (lambda: None)
        try:
            try:
                assert self.proc.stdin is not None
                self.proc.stdin.write(encode(Frame(request=request)))
                self.proc.stdin.flush()
            except (OSError, ValueError):
                return self._died()
            deadline = time.monotonic() + timeout_s
            fd = self.proc.stdout.fileno()  # type: ignore[union-attr]
            while True:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    self.kill("timeout")
                    raise WorkerDied("timeout", f"no result within {timeout_s:g} s: the worker was killed",
                                     self.log_tail())
                try:
                    ready, _, _ = select.select([fd], [], [], min(remaining, 0.5))
                except (OSError, ValueError):
                    return self._died()
                if not ready:
                    continue
                try:
                    data = os.read(fd, 1 << 20)
                except OSError:
                    data = b""
                if not data:
                    return self._died()
                try:
                    frames = self._decoder.feed(data)
                except ProtocolError as exc:
                    self.kill("protocol")
                    raise WorkerDied("crashed", f"the worker sent garbage ({exc})", self.log_tail()) from exc
                for frame in frames:
                    if frame.progress is not None:
                        p = frame.progress
                        try:
                            report(ProgressEvent(stage=p.stage, message=p.message, percent=p.percent))
                        except Exception:
                            pass
                    elif frame.reply is not None:
                        return frame.reply
        finally:
            unregister()

    def _died(self) -> Reply:
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.kill("unresponsive")
        why = self._killed_for
        tail = self.log_tail()
        self._close_pipes()
        if why == "cancelled":
            raise WorkerDied("cancelled", "cancelled: the worker was killed", tail)
        if why == "timeout":
            raise WorkerDied("timeout", "timed out: the worker was killed", tail)
        code = self.proc.returncode
        exit_text = describe_exit(code)
        lowered = tail.lower()
        if code == -signal.SIGKILL or "out of memory" in lowered or "memoryerror" in lowered:
            # A SIGKILL nobody here sent is, in practice, the kernel's OOM killer.
            raise WorkerDied("out_of_memory", f"the worker was killed ({exit_text}); most likely out of host memory",
                             tail)
        raise WorkerDied("crashed", f"the worker died: {exit_text}", tail)


class WorkerPool:
    """Hands jobs to a reused worker; replaces it when a job costs it its life."""

    def __init__(self, settings: Settings, workdir: Path, *, preload: str = "torch") -> None:
        self.settings = settings
        self.workdir = Path(workdir)
        self.preload = preload
        self._worker: WorkerProcess | None = None
        self._lock = threading.Lock()
        self._job_ids = itertools.count(1)
        self.events: list[str] = []  # what happened to workers, for verdicts

    @property
    def python(self) -> str:
        return self.settings.python or sys.executable

    def _ensure(self) -> tuple[WorkerProcess, bool]:
        if self._worker is not None and self._worker.alive():
            return self._worker, False
        self.workdir.mkdir(parents=True, exist_ok=True)
        self._worker = WorkerProcess(self.python, self.workdir, preload=self.preload,
                                     extra_env=self.settings.extra_env)
        return self._worker, True

    def warm(self) -> None:
        """Start a worker now, so the first job does not pay for the torch import."""
        with self._lock:
            self._ensure()

    @property
    def worker_pid(self) -> int | None:
        return self._worker.pid if self._worker is not None and self._worker.alive() else None

    def call_raw(self, kind: str, payload: Any, *, timeout_s: float, cancel: CancelToken | None = None,
                 report: Reporter = no_report) -> tuple[Any, bool]:
        """Run one job; returns (reply payload as plain data, whether a fresh worker was started)."""
        if cancel is not None:
            cancel.raise_if_cancelled()
        with self._lock:
            worker, fresh = self._ensure()
            request = Request(kind=kind, payload=to_dict(payload), job_id=str(next(self._job_ids)))
            try:
                reply = worker.call(request, timeout_s=timeout_s, cancel=cancel, report=report)
            except WorkerDied as died:
                self.events.append(f"worker {worker.pid} lost: {died.message}")
                self._worker = None
                raise
            if reply.retire:
                self.events.append(f"worker {worker.pid} retired: {reply.retire_reason}")
                worker.close()
                self._worker = None
            if not reply.ok:
                if reply.error == "out_of_memory":
                    raise WorkerDied("out_of_memory", reply.message, reply.traceback)
                raise WorkerError(reply.error, reply.message, reply.traceback)
            return reply.payload, fresh

    def call(self, kind: str, payload: Any, reply_cls: type[T], *, timeout_s: float,
             cancel: CancelToken | None = None, report: Reporter = no_report) -> T:
        data, _ = self.call_raw(kind, payload, timeout_s=timeout_s, cancel=cancel, report=report)
        return from_dict(data, reply_cls)

    def close(self) -> None:
        with self._lock:
            if self._worker is not None:
                self._worker.close()
                self._worker = None
