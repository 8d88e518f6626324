"""The long-lived Ray actor that holds one GPU of a cluster node for a whole run.

It runs on the node, in the job's runtime environment: this machine's stitch_lsp
(shipped as a ``py_modules`` package) and the suite's task files (shipped as the
``working_dir``, which is the actor's current directory). It owns a
``shard.ShardWorker``, so the shard process on its GPU (torch, the CUDA context,
compile caches) stays warm from task to task, and a task that hangs or kills its
shard costs that task only, exactly as on one machine.

Ray sets ``CUDA_VISIBLE_DEVICES`` to the GPU it granted (``num_gpus=1``); the shard
inherits it. Methods take and return plain dicts (``serde``), so nothing but
Stitch's own data crosses the wire. The actor runs several methods at once
(``max_concurrency``) so that ``cancel`` and ``progress`` answer while a task runs;
the shard takes one request at a time.
"""

from __future__ import annotations

import os
import tempfile
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from stitch_lsp.benchsuite.executor import WorkerSpec
from stitch_lsp.benchsuite.shard import ShardWorker, safe_name
from stitch_lsp.benchsuite.tasks import BenchTask
from stitch_lsp.benchsuite.versions import local_versions
from stitch_lsp.cancellation import CancelToken, ProgressEvent
from stitch_lsp.pipeline import Candidate
from stitch_lsp.serde import from_dict, to_dict
from stitch_lsp.contract.verify import VerifyOptions


class GpuActor:
    def __init__(self, spec: dict[str, Any]) -> None:
        import ray

        worker_spec = from_dict(spec, WorkerSpec)
        self.node = ray.util.get_node_ip_address()
        self.node_id = ray.get_runtime_context().get_node_id()
        device = os.environ.get("CUDA_VISIBLE_DEVICES", "")
        self.slot = f"{self.node}:{device or 'cpu'}"
        # The run directory lives on the driver's machine; here only scratch space, one per GPU of the node.
        base = (Path(tempfile.gettempdir()) / "stitch-cluster" / safe_name(worker_spec.run_id or "run")
                / f"{self.node_id[:8]}-{safe_name(device or 'cpu')}")
        self.shard = ShardWorker(self.slot, device=device, coder=worker_spec.coder, settings=worker_spec.settings,
                                 log_dir=base / "logs", backend=worker_spec.backend,
                                 task_timeout_s=worker_spec.task_timeout_s,
                                 backend_options=worker_spec.backend_options(base / "work"))
        self._lock = threading.Lock()
        self._tokens: set[CancelToken] = set()
        self._progress: list[str] = []

    # -- what the driver asks
    def describe(self) -> dict[str, Any]:
        return {"slot": self.slot, "node": self.node, "node_id": self.node_id,
                "versions": to_dict(local_versions(self.slot))}

    def run(self, task: dict[str, Any]) -> dict[str, Any]:
        bench_task = from_dict(task, BenchTask)
        if not os.path.isabs(bench_task.path):  # relative to the shipped suite, our working directory
            bench_task.path = str(Path.cwd() / bench_task.path)
        with self._request() as cancel:
            result, detail = self.shard.run(bench_task, cancel, self._note)
        return {"result": to_dict(result), "detail": to_dict(detail) if detail is not None else None}

    def verify(self, reference_source: str, candidate: dict[str, Any], options: dict[str, Any] | None) -> dict:
        def report(event: ProgressEvent) -> None:
            self._note(f"{event.stage} {event.message}".strip())

        with self._request() as cancel:
            verdict = self.shard.verify(reference_source, from_dict(candidate, Candidate),
                                        from_dict(options, VerifyOptions) if options else None,
                                        cancel=cancel, report=report)
        return to_dict(verdict)

    def gpu_info(self) -> dict[str, Any]:
        with self._request() as cancel:
            return to_dict(self.shard.gpu_info(cancel))

    def progress(self) -> list[str]:
        with self._lock:
            lines, self._progress = self._progress, []
        return lines

    def cancel(self) -> None:
        with self._lock:
            tokens = list(self._tokens)
        for token in tokens:
            token.cancel("interrupted")

    def log_text(self, limit: int = 1_000_000) -> str:
        try:
            return self.shard.log_path.read_bytes()[-limit:].decode("utf-8", "replace")
        except OSError:
            return ""

    def close(self) -> None:
        self.shard.close()

    # -- pieces
    def _note(self, line: str) -> None:
        with self._lock:
            self._progress.append(line)

    @contextmanager
    def _request(self) -> Iterator[CancelToken]:
        """A cancel token for one request, reachable from ``cancel`` while the request runs."""
        token = CancelToken()
        with self._lock:
            self._tokens.add(token)
        try:
            yield token
        finally:
            with self._lock:
                self._tokens.discard(token)
