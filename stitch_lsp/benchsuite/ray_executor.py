"""The Ray executor: ``stitch bench DIR --cluster ray://HOST:PORT`` (or ``HOST:PORT``, ``auto``).

This machine (the driver) connects to the cluster as one Ray job whose runtime
environment carries this machine's ``stitch_lsp`` (``py_modules``) and the suite's
directory (``working_dir``), then starts one ``ray_actor.GpuActor`` per GPU
(``num_gpus=1``). Before any task runs, every actor says which Stitch, torch and
Python it runs (``versions``); the run is refused when they differ from this
machine's. The scheduler (``scheduler.run_tasks``) then hands tasks to the actors
through ``RayGpuWorker`` handles, exactly as it hands them to local shard
processes; results come back here and are saved in the run directory as they
finish, so the table, Ctrl-C and ``--resume`` work as on one machine.

An actor that dies under a task (its node lost, the process killed) raises
``WorkerLost``: the task goes back in the queue, is marked as retried, and the
handle starts a fresh actor wherever the cluster has a free GPU.

Ray is an optional dependency: ``pip install 'stitch-lsp[cluster]'``.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import socket
import time
from pathlib import Path
from typing import Any, Callable, TextIO

import attrs

import stitch_lsp
from stitch_lsp.benchsuite.executor import ExecutorError, WorkerSpec
from stitch_lsp.benchsuite.results import INTERRUPTED, GpuInfo, TaskDetail, TaskResult, failed_result
from stitch_lsp.benchsuite.scheduler import WorkerLost
from stitch_lsp.benchsuite.shard import GRACE_S, safe_name
from stitch_lsp.benchsuite.tasks import BenchTask
from stitch_lsp.benchsuite.versions import Versions, local_versions, mismatches
from stitch_lsp.cancellation import Cancelled, CancelToken, ProgressEvent
from stitch_lsp.serde import from_dict, to_dict
from stitch_lsp.verdict import Verdict

INSTALL_HINT = "pip install 'stitch-lsp[cluster]'"
START_TIMEOUT_S = 180.0  # for the actors to be placed and import Stitch; GPUs busy with other jobs stay unused
REVIVE_TIMEOUT_S = 60.0  # for a replacement actor after one was lost
ANSWER_SLACK_S = 120.0  # beyond the task timeout (which the actor's shard enforces) before an actor counts as lost
POLL_S = 0.2
PROGRESS_EVERY_S = 1.0


def _ray() -> Any:
    try:
        import ray
    except ImportError:
        raise ExecutorError(f"--cluster needs Ray, which is not installed here: {INSTALL_HINT}") from None
    return ray


def resolve_address(cluster: str) -> str:
    """``--cluster`` as given; empty means ``$RAY_ADDRESS``."""
    address = cluster.strip() or os.environ.get("RAY_ADDRESS", "").strip()
    if not address:
        raise ExecutorError("--cluster without an address needs RAY_ADDRESS (e.g. ray://head:10001), "
                            "or give one: --cluster ray://HOST:PORT, --cluster HOST:PORT or --cluster auto")
    return address


def check_reachable(address: str, timeout_s: float = 5.0) -> None:
    """Fail fast where nothing listens: Ray itself retries a wrong address for minutes."""
    if address == "auto" or address.startswith(("anyscale://", "local")):
        return
    hostport = address.split("://", 1)[-1].rstrip("/")
    host, _, port = hostport.rpartition(":")
    if not host or not port.isdigit():
        raise ExecutorError(f"--cluster {address}: want ray://HOST:PORT, HOST:PORT or auto")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s).close()
    except OSError as exc:
        raise ExecutorError(f"nothing answers at {host}:{port} ({exc.strerror or exc}): is the cluster's head "
                            f"running (`ray start --head` there), and is the port right? "
                            "ray:// wants the client port (10001 by default), HOST:PORT the GCS port (6379)") from None


def _package_dir(module: str) -> Path | None:
    """The top-level package directory of ``module`` (to ship it), or None when it is not a package."""
    spec = importlib.util.find_spec(module.split(".", 1)[0])
    locations = list(spec.submodule_search_locations or []) if spec else []
    return Path(locations[0]) if locations else None


def runtime_env(spec: WorkerSpec) -> dict[str, Any]:
    """What travels with the job: this machine's Stitch, the backend's package when it is not Stitch's
    (the tests' stand-in), and the suite's task files as every actor's working directory."""
    modules = [Path(stitch_lsp.__file__).parent]
    backend = _package_dir(spec.backend)
    if backend is not None and backend.resolve() != modules[0].resolve():
        modules.append(backend)
    env: dict[str, Any] = {"py_modules": [str(m) for m in modules],
                           "excludes": ["__pycache__/", "*.pyc", ".stitch/", ".git/"]}
    if spec.tasks_dir is not None:
        env["working_dir"] = str(spec.tasks_dir)
    return env


def shipped(task: BenchTask, tasks_dir: Path | None) -> BenchTask:
    """``task`` with its path relative to the suite, which the actors have as their working directory."""
    if tasks_dir is None:
        return task
    try:
        rel = Path(task.path).resolve().relative_to(tasks_dir.resolve())
    except ValueError:
        return task  # outside the suite: works only where the path is the same on every node
    return attrs.evolve(task, path=rel.as_posix())


class RayGpuWorker:
    """The driver's handle on one GpuActor: the scheduler's ``Worker``, and a verifier for candidates."""

    def __init__(self, executor: "RayExecutor", actor: Any, described: dict[str, Any]) -> None:
        self.executor = executor
        self.actor = actor
        self.slot: str = described["slot"]
        self.node: str = described["node"]
        self.node_id: str = described.get("node_id", "")
        self.coder = executor.spec.coder if executor.spec else ""

    # -- scheduler's Worker
    def run(self, task: BenchTask, cancel: CancelToken,
            on_progress: Callable[[str], None] = lambda _: None) -> tuple[TaskResult, TaskDetail | None]:
        start = time.monotonic()
        spec = self.executor.spec
        timeout = (spec.task_timeout_s if spec else 900.0) + ANSWER_SLACK_S
        ref = self.actor.run.remote(to_dict(shipped(task, spec.tasks_dir if spec else None)))
        payload = self._wait(ref, cancel, on_progress, timeout)
        if payload is None:
            return failed_result(task, INTERRUPTED, "interrupted", coder=self.coder, gpu=self.slot,
                                 seconds=round(time.monotonic() - start, 3)), None
        result = from_dict(payload["result"], TaskResult)
        result.gpu = self.slot
        detail = from_dict(payload["detail"], TaskDetail) if payload.get("detail") else None
        return result, detail

    def revive(self, cancel: CancelToken) -> bool:
        """A fresh actor in place of the lost one, wherever the cluster has a free GPU."""
        self._kill()
        replacement = self.executor.start_actors(1, REVIVE_TIMEOUT_S, cancel)
        if not replacement:
            return False
        self.actor, described = replacement[0]
        self.slot, self.node, self.node_id = described["slot"], described["node"], described.get("node_id", "")
        if any(w is not self and w.slot == self.slot for w in self.executor.workers):
            self.slot = _long_slot(self)
        return True

    def close(self) -> None:
        self.executor.keep_log(self)
        try:  # the shard on the node ends its work and exits; then the actor goes
            _ray().get(self.actor.close.remote(), timeout=GRACE_S + 10)
        except Exception:
            pass
        self._kill()

    def gpu_info(self, cancel: CancelToken, timeout_s: float = 300.0) -> GpuInfo:
        try:
            payload = self._wait(self.actor.gpu_info.remote(), cancel, lambda _: None, timeout_s)
        except WorkerLost as exc:
            return GpuInfo(slot=self.slot, message=f"copy bandwidth not measured: {exc}")
        if payload is None:
            return GpuInfo(slot=self.slot, message="copy bandwidth not measured: interrupted")
        info = from_dict(payload, GpuInfo)
        info.slot = self.slot
        return info

    # -- a verifier for the LLM Coder's candidates (the Verifier's ``verify`` signature)
    def verify(self, reference_source: str, candidate: Any, options: Any = None, *,
               cancel: CancelToken | None = None, report: Any = None) -> Verdict:
        cancel = cancel or CancelToken()
        spec = self.executor.spec

        def progress(line: str) -> None:
            if report is not None:
                stage, _, text = line.partition(" ")
                report(ProgressEvent(stage, text))

        ref = self.actor.verify.remote(reference_source, to_dict(candidate),
                                       to_dict(options) if options is not None else None)
        payload = self._wait(ref, cancel, progress, (spec.task_timeout_s if spec else 900.0) + ANSWER_SLACK_S)
        if payload is None:
            raise Cancelled(cancel.reason or "interrupted")
        return from_dict(payload, Verdict)

    # -- pieces
    def _wait(self, ref: Any, cancel: CancelToken, on_progress: Callable[[str], None],
              timeout_s: float) -> Any | None:
        """The call's answer; None when cancelled; ``WorkerLost`` when the actor died or went silent."""
        ray = _ray()
        deadline = time.monotonic() + timeout_s
        polled = time.monotonic()
        try:
            while True:
                ready, _ = ray.wait([ref], timeout=POLL_S)
                if ready:
                    self._forward_progress(on_progress)
                    return ray.get(ref)
                if cancel.cancelled:
                    self.actor.cancel.remote()  # the actor's shard kills what runs, then answers
                    ray.wait([ref], timeout=GRACE_S + 10)
                    return None
                now = time.monotonic()
                if now - polled >= PROGRESS_EVERY_S:
                    polled = now
                    self._forward_progress(on_progress)
                if now > deadline:
                    self._kill()
                    raise WorkerLost(f"its actor on {self.node} gave no answer in {timeout_s:.0f} s")
        except ray.exceptions.RayActorError as exc:
            raise WorkerLost(f"its actor on {self.node} died: {_first_line(exc)}") from None

    def _forward_progress(self, on_progress: Callable[[str], None]) -> None:
        ray = _ray()
        for line in ray.get(self.actor.progress.remote(), timeout=30):
            on_progress(line)

    def _kill(self) -> None:
        try:
            _ray().kill(self.actor)
        except Exception:
            pass


def _distinct_slots(workers: list[RayGpuWorker]) -> None:
    """Name each GPU once: nodes that share an address (several on one host) get their node id too."""
    seen: dict[str, int] = {}
    for w in workers:
        seen[w.slot] = seen.get(w.slot, 0) + 1
    for w in workers:
        if seen[w.slot] > 1:
            w.slot = _long_slot(w)


def _long_slot(worker: RayGpuWorker) -> str:
    ip, _, device = worker.slot.rpartition(":")
    return f"{ip}/{worker.node_id[:6]}:{device}"


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


class RayExecutor:
    """One GpuActor per GPU of the cluster at ``address`` (at most ``gpus``)."""

    def __init__(self, cluster: str, gpus: int | None = None, *, start_timeout_s: float = START_TIMEOUT_S) -> None:
        self.cluster = cluster
        self.gpus = gpus
        self.start_timeout_s = start_timeout_s
        self.label = f"ray {cluster or '$RAY_ADDRESS'}"
        self.spec: WorkerSpec | None = None
        self.workers: list[RayGpuWorker] = []
        self._connected = False
        self._log_dir: Path | None = None

    def start(self, spec: WorkerSpec, limit: int, out: TextIO) -> list[RayGpuWorker]:
        ray = _ray()
        address = resolve_address(self.cluster)
        check_reachable(address)
        self.spec, self._log_dir = spec, spec.run_dir / "logs"
        print(f"connecting to the Ray cluster at {address} ...", file=out, flush=True)
        try:
            ray.init(address=address, runtime_env=runtime_env(spec), log_to_driver=False,
                     logging_level=logging.WARNING)
        except Exception as exc:  # ConnectionError, a runtime env too large, a bad address, ...
            raise ExecutorError(f"cannot start a job on the Ray cluster at {address}: {_first_line(exc)}") from None
        self._connected = True
        total = int(ray.cluster_resources().get("GPU", 0))
        if total < 1:
            raise ExecutorError(f"the Ray cluster at {address} has no GPUs (start its nodes with "
                                "`ray start ... --num-gpus=N`, or let Ray detect them)")
        wanted = min(total, self.gpus or total, max(1, limit))
        started = self.start_actors(wanted, self.start_timeout_s, CancelToken())
        if not started:
            raise ExecutorError(f"no GPU of the Ray cluster at {address} became free in "
                                f"{self.start_timeout_s:.0f} s ({total} in the cluster, all busy?)")
        self._check_versions([d for _, d in started], [a for a, _ in started])
        workers = [RayGpuWorker(self, actor, described) for actor, described in started]
        _distinct_slots(workers)
        self.workers = workers
        nodes = len({w.node_id or w.node for w in workers})
        self.label = f"ray {address} ({len(workers)} GPUs on {nodes} node{'s' if nodes != 1 else ''})"
        if len(started) < wanted:
            print(f"warning: only {len(started)} of {wanted} GPUs of the cluster were free", file=out, flush=True)
        return workers

    def start_actors(self, count: int, timeout_s: float, cancel: CancelToken) -> list[tuple[Any, dict[str, Any]]]:
        """Up to ``count`` ready actors and what each said of itself; those not placed in time are dropped."""
        ray = _ray()
        from stitch_lsp.benchsuite.ray_actor import GpuActor

        assert self.spec is not None
        remote = ray.remote(GpuActor).options(num_gpus=1, num_cpus=0, max_concurrency=4, max_restarts=0)
        actors = [remote.remote(to_dict(self.spec)) for _ in range(count)]
        refs = {actor.describe.remote(): actor for actor in actors}
        ready: list[tuple[Any, dict[str, Any]]] = []
        deadline = time.monotonic() + timeout_s
        waiting = list(refs)
        while waiting and time.monotonic() < deadline and not cancel.cancelled:
            done, waiting = ray.wait(waiting, num_returns=1, timeout=min(1.0, max(0.0, deadline - time.monotonic())))
            for ref in done:
                try:
                    ready.append((refs[ref], ray.get(ref)))
                except ray.exceptions.RayError:
                    pass  # died while starting: not counted
        for ref in waiting:
            ray.kill(refs[ref])
        return ready

    def _check_versions(self, described: list[dict[str, Any]], actors: list[Any]) -> None:
        here = local_versions()
        problems = mismatches(here, [from_dict(d["versions"], Versions) for d in described])
        if problems:
            for actor in actors:
                _ray().kill(actor)
            raise ExecutorError(
                "the cluster's workers do not run what this machine runs, so their verdicts could not be "
                "compared:\n  " + "\n  ".join(problems) + "\nInstall the same torch release on every node "
                f"(here: torch {here.torch or 'not installed'}, Python {here.python}); Stitch's own code "
                "travels with the job, so a different Stitch means an installed copy on the node shadows it.")

    def keep_log(self, worker: RayGpuWorker) -> None:
        """Copy the actor's shard log into this machine's run directory (logs/shard-NODE-GPU.log)."""
        if self._log_dir is None:
            return
        try:
            text = _ray().get(worker.actor.log_text.remote(), timeout=30)
        except Exception:
            return
        if text:
            self._log_dir.mkdir(parents=True, exist_ok=True)
            with open(self._log_dir / f"shard-{safe_name(worker.slot)}.log", "a", encoding="utf-8") as fh:
                fh.write(text)

    def close(self) -> None:
        if self._connected:
            self._connected = False
            try:
                _ray().shutdown()
            except Exception:
                pass
