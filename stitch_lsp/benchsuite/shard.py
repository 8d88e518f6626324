"""One process per GPU: ``python -m stitch_lsp.benchsuite.shard``.

The parent (``ShardWorker``) starts it with ``CUDA_VISIBLE_DEVICES`` set to one
GPU and sends it tasks, one JSON line each, on stdin; the child answers with
JSON lines on stdout (``ready``, ``progress``, ``result``, ``verdict``, ``gpu``). It stays up
between tasks, so the Verifier's worker (torch import, CUDA context, compile
caches) is paid once per GPU. A task that hangs or kills the child costs only
that task: the parent kills the tree and starts a fresh child for the next one.

Requests: ``task`` (a bench task, answered by a ``result``), ``verify`` (a candidate
against a reference, for the LLM Coder's candidate pool, answered by a ``verdict``)
and ``gpu`` (the copy bandwidth).

``--backend MODULE`` names the module that provides ``run_task``, ``verify`` and
``measure_gpu`` (default ``stitch_lsp.benchsuite.runner``); the tests point it
at a stand-in that needs no GPU.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable

from stitch_lsp.benchsuite.results import (
    ERROR, INTERRUPTED, SHARD_CRASHED, TIMEOUT, GpuInfo, TaskDetail, TaskResult, failed_result,
)
from stitch_lsp.benchsuite.stage_clock import StageClock
from stitch_lsp.benchsuite.tasks import BenchTask
from stitch_lsp.cancellation import Cancelled, CancelToken, ProgressEvent
from stitch_lsp.child_env import ANTHROPIC_KEY, llm_worker_env
from stitch_lsp.serde import from_dict, to_dict
from stitch_lsp.settings import Settings
from stitch_lsp.verdict import Verdict, VerdictStatus

DEFAULT_BACKEND = "stitch_lsp.benchsuite.runner"
GRACE_S = 3.0  # after SIGTERM, before SIGKILL: time for the child to cancel its own workers


# ---------------------------------------------------------------- child side


def _child_main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m stitch_lsp.benchsuite.shard")
    parser.add_argument("--coder", default="template")
    parser.add_argument("--settings", default="{}", help="Settings as JSON")
    parser.add_argument("--backend", default=DEFAULT_BACKEND)
    parser.add_argument("--slot", default="")
    parser.add_argument("--options", default="{}", help="JSON keyword arguments for the backend's configure()")
    args = parser.parse_args(argv)

    # The protocol owns the real stdout; anything else printed (by a library, a
    # candidate, a child process) goes to stderr, which the parent logs.
    proto = os.fdopen(os.dup(1), "w", buffering=1, encoding="utf-8")
    os.dup2(2, 1)
    sys.stdout = sys.stderr

    def send(message: dict[str, Any]) -> None:
        proto.write(json.dumps(message) + "\n")
        proto.flush()

    cancel = CancelToken()
    signal.signal(signal.SIGTERM, lambda *_: cancel.cancel("terminated"))
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides; Ctrl-C reaches the whole group
    settings = from_dict(json.loads(args.settings), Settings)
    backend = importlib.import_module(args.backend)
    if hasattr(backend, "configure"):
        backend.configure(**json.loads(args.options))
    send({"kind": "ready", "pid": os.getpid()})

    def report(event: ProgressEvent) -> None:
        send({"kind": "progress", "stage": event.stage, "message": event.message, "percent": event.percent})

    for line in sys.stdin:
        if cancel.cancelled:
            break
        message = json.loads(line)
        kind = message.get("kind")
        try:
            if kind == "task":
                task = from_dict(message["task"], BenchTask)
                start = time.monotonic()
                steps = StageClock()

                def timed_report(event: ProgressEvent) -> None:
                    steps.event(event)
                    report(event)

                try:
                    result, detail = backend.run_task(task, settings, args.coder, cancel, timed_report)
                except Cancelled:
                    return 1
                except Exception as exc:  # a bug in the Coder or the Verifier: one task lost, not the run
                    result = failed_result(task, ERROR, f"{type(exc).__name__}: {exc}", coder=args.coder)
                    detail = None
                result.gpu = args.slot
                result.seconds = round(time.monotonic() - start, 3)
                result.steps = steps.finish()
                send({"kind": "result", "result": to_dict(result),
                      "detail": to_dict(detail) if detail is not None else None})
            elif kind == "verify":
                from stitch_lsp.pipeline import Candidate
                from stitch_lsp.contract.verify import VerifyOptions

                options = from_dict(message["options"], VerifyOptions) if message.get("options") else None
                try:
                    verdict = backend.verify(settings, message["reference"],
                                             from_dict(message["candidate"], Candidate), options, cancel, report)
                except Cancelled:
                    return 1
                except Exception as exc:
                    verdict = Verdict(VerdictStatus.ERROR, summary=f"the Verifier failed: {type(exc).__name__}: {exc}")
                send({"kind": "verdict", "verdict": to_dict(verdict)})
            elif kind == "gpu":
                info = backend.measure_gpu(settings, args.slot, cancel)
                send({"kind": "gpu", "info": to_dict(info)})
            else:
                send({"kind": "error", "message": f"unknown request {kind!r}"})
        except Cancelled:
            return 1
    return 0


# ---------------------------------------------------------------- parent side


def safe_name(slot: str) -> str:
    """A slot as a file name part ("10.0.0.5:1" -> "10.0.0.5-1")."""
    return "".join(c if c.isalnum() or c in "._-" else "-" for c in slot)


def _kill(proc: subprocess.Popen, grace_s: float) -> None:
    from stitch_lsp.jobs.process import kill_tree

    if proc.poll() is None:
        try:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=grace_s)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            pass
    kill_tree(proc)
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        pass


class ShardWorker:
    """The parent's handle on one shard child, bound to one GPU.

    ``slot`` names the GPU in results and logs; ``device`` is the child's
    ``CUDA_VISIBLE_DEVICES`` (default: the slot, as on this machine; a cluster
    worker names its slot after the node and passes the device the cluster gave it).
    """

    def __init__(self, slot: str, *, coder: str, settings: Settings, log_dir: Path,
                 backend: str = DEFAULT_BACKEND, task_timeout_s: float = 900.0,
                 python: str = sys.executable, env: dict[str, str] | None = None,
                 backend_options: dict[str, Any] | None = None, device: str | None = None) -> None:
        self.slot = slot
        self.device = slot if device is None else device
        self.backend_options = dict(backend_options or {})
        self.coder = coder
        self.settings = settings
        self.backend = backend
        self.task_timeout_s = task_timeout_s
        self.python = python
        self.log_dir = log_dir
        self.base_env = dict(os.environ if env is None else env)
        self._proc: subprocess.Popen | None = None
        self._lines: queue.Queue[str | None] = queue.Queue()
        self._log = None
        self.restarts = 0
        self._busy = threading.Lock()  # one request at a time: the child answers them in order

    # -- process management
    def _env(self) -> dict[str, str]:
        # Allowlisted (child_env); the Anthropic key only for a shard whose Coder may call the API.
        # (What this shard starts in turn, the Verifier's worker above all, gets an allowlisted
        # environment again: the key goes no further.)
        key = self.base_env.get(ANTHROPIC_KEY) if self.coder != "template" else None
        env = llm_worker_env(key, self.settings.extra_env, source=self.base_env)
        if self.device not in ("", "cpu"):
            env["CUDA_VISIBLE_DEVICES"] = self.device
        env["PYTHONUNBUFFERED"] = "1"
        return env

    def _start(self) -> None:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self._log = open(self.log_path, "ab")
        argv = [self.python, "-m", "stitch_lsp.benchsuite.shard", "--coder", self.coder,
                "--settings", json.dumps(to_dict(self.settings)), "--backend", self.backend, "--slot", self.slot,
                "--options", json.dumps(self.backend_options)]
        self._proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log,
                                      env=self._env(), start_new_session=True, text=True, bufsize=1)
        lines: queue.Queue[str | None] = queue.Queue()
        self._lines = lines
        stdout = self._proc.stdout

        def pump() -> None:
            for line in stdout:  # type: ignore[union-attr]
                lines.put(line)
            lines.put(None)

        threading.Thread(target=pump, daemon=True, name=f"shard-{self.slot}-stdout").start()

    def _stop(self) -> None:
        if self._proc is not None:
            _kill(self._proc, GRACE_S)
            self._proc = None
        if self._log is not None:
            self._log.close()
            self._log = None

    def close(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            try:
                self._proc.stdin.close()  # type: ignore[union-attr]
                self._proc.wait(timeout=GRACE_S)
            except (OSError, subprocess.TimeoutExpired):
                pass
        self._stop()

    @property
    def log_path(self) -> Path:
        return self.log_dir / f"shard-{safe_name(self.slot) or 'default'}.log"

    def _log_tail(self, limit: int = 600) -> str:
        try:
            data = self.log_path.read_bytes()[-limit:]
        except OSError:
            return ""
        return " ".join(data.decode("utf-8", "replace").split())

    # -- one request
    def _request(self, message: dict[str, Any], want: str, timeout_s: float, cancel: CancelToken,
                 on_progress: Callable[[str], None]) -> tuple[str, dict[str, Any] | None]:
        """Send ``message``; return ("ok", reply), ("timeout"|"crashed"|"interrupted", None)."""
        with self._busy:
            return self._exchange(message, want, timeout_s, cancel, on_progress)

    def _exchange(self, message: dict[str, Any], want: str, timeout_s: float, cancel: CancelToken,
                  on_progress: Callable[[str], None]) -> tuple[str, dict[str, Any] | None]:
        if self._proc is None or self._proc.poll() is not None:
            if self._proc is not None:
                self._stop()
                self.restarts += 1
            self._start()
        assert self._proc is not None and self._proc.stdin is not None
        try:
            self._proc.stdin.write(json.dumps(message) + "\n")
            self._proc.stdin.flush()
        except OSError:
            self._stop()
            return SHARD_CRASHED, None
        deadline = time.monotonic() + timeout_s
        while True:
            if cancel.cancelled:
                self._stop()
                return INTERRUPTED, None
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self._stop()
                return TIMEOUT, None
            try:
                line = self._lines.get(timeout=min(0.2, remaining))
            except queue.Empty:
                continue
            if line is None:  # the child exited
                self._proc.wait()
                return SHARD_CRASHED, None
            try:
                reply = json.loads(line)
            except ValueError:
                continue
            if reply.get("kind") == "progress":
                on_progress(f"{reply.get('stage', '')} {reply.get('message', '')}".strip())
            elif reply.get("kind") == want:
                return "ok", reply

    def run(self, task: BenchTask, cancel: CancelToken,
            on_progress: Callable[[str], None] = lambda _: None) -> tuple[TaskResult, TaskDetail | None]:
        start = time.monotonic()
        state, reply = self._request({"kind": "task", "task": to_dict(task)}, "result",
                                     self.task_timeout_s, cancel, on_progress)
        if state == "ok" and reply is not None:
            result = from_dict(reply["result"], TaskResult)
            detail = from_dict(reply["detail"], TaskDetail) if reply.get("detail") else None
            return result, detail
        reason = self._why(state, "task")
        return failed_result(task, state, reason, coder=self.coder, gpu=self.slot,
                             seconds=round(time.monotonic() - start, 3)), None

    def _why(self, state: str, what: str) -> str:
        tail = self._log_tail()
        return {
            TIMEOUT: f"no result within {self.task_timeout_s:g} s; the {what}'s processes were killed",
            SHARD_CRASHED: f"the process running the {what} died" + (f": {tail}" if tail else ""),
            INTERRUPTED: "interrupted",
        }[state]

    def verify(self, reference_source: str, candidate: Any, options: Any = None, *,
               cancel: CancelToken | None = None, report: Any = None) -> Verdict:
        """The candidate's verdict from this GPU's Verifier (the Verifier's own ``verify`` signature)."""
        cancel = cancel or CancelToken()

        def progress(line: str) -> None:
            if report is not None:
                stage, _, text = line.partition(" ")
                report(ProgressEvent(stage, text))

        message = {"kind": "verify", "reference": reference_source, "candidate": to_dict(candidate),
                   "options": to_dict(options) if options is not None else None}
        state, reply = self._request(message, "verdict", self.task_timeout_s, cancel, progress)
        if state == "ok" and reply is not None:
            return from_dict(reply["verdict"], Verdict)
        if state == INTERRUPTED:
            raise Cancelled(cancel.reason or "interrupted")
        status = VerdictStatus.TIMEOUT if state == TIMEOUT else VerdictStatus.CRASHED
        return Verdict(status, summary=self._why(state, "candidate"), events=[f"gpu {self.slot}: {state}"])

    def gpu_info(self, cancel: CancelToken, timeout_s: float = 300.0) -> GpuInfo:
        state, reply = self._request({"kind": "gpu"}, "gpu", timeout_s, cancel, lambda _: None)
        if state == "ok" and reply is not None:
            return from_dict(reply["info"], GpuInfo)
        return GpuInfo(slot=self.slot, message=f"copy bandwidth not measured: {state}")


if __name__ == "__main__":
    sys.exit(_child_main(sys.argv[1:]))
