"""Where the GPU work of a run happens: the executor interface, and the local executor.

An executor starts workers, one per GPU it may use. ``scheduler.run_tasks`` feeds
them bench tasks; ``candidate_pool.CandidatePool`` lends them to the LLM Coder to
verify several candidates at once. Two executors:

- ``LocalExecutor`` (the default, no extra dependency): one shard process per
  visible GPU of this machine (``shard.ShardWorker``);
- ``ray_executor.RayExecutor`` (``stitch bench --cluster``): one long-lived actor per
  GPU of a Ray cluster, each holding a shard process on its node.

Either way a worker keeps its shard process (torch, the CUDA context, compile
caches) warm between tasks, and results come back to this machine.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol, TextIO

from attrs import define

from stitch_lsp.benchsuite import gpus as gpu_slots
from stitch_lsp.benchsuite.scheduler import Worker
from stitch_lsp.benchsuite.shard import DEFAULT_BACKEND, ShardWorker
from stitch_lsp.settings import Settings


class ExecutorError(Exception):
    """The executor cannot start (no cluster, no GPU, versions that differ); the message says what to do."""


@define
class WorkerSpec:
    """What every worker runs with, wherever it runs."""

    coder: str
    settings: Settings
    run_dir: Path  # this machine's run directory: shard logs under logs/, local work under work/<slot>
    run_id: str = ""
    tasks_dir: Path | None = None  # the suite, for executors that ship it to other machines
    backend: str = DEFAULT_BACKEND
    profile: str = "all"
    sanitize: bool = False
    task_timeout_s: float = 900.0
    no_cache: bool = False  # measure again: no verdict cache, no reused torch.compile baseline
    precision: str = "fp32"

    def backend_options(self, workdir: Path) -> dict[str, Any]:
        options: dict[str, Any] = {"workdir": str(workdir), "profile": self.profile, "sanitize": self.sanitize}
        if self.no_cache:
            options["no_cache"] = True
        if self.precision != "fp32":  # named only when asked for: backends written before it take the default
            options["precision"] = self.precision
        return options


class Executor(Protocol):
    label: str  # where the work runs, for the run's record: "local", "ray 10.0.0.1:6379 (8 GPUs, 2 nodes)"

    def start(self, spec: WorkerSpec, limit: int, out: TextIO) -> list[Worker]:
        """At most ``limit`` (>= 1) workers, ready to take tasks; ``ExecutorError`` when none can start."""
        ...

    def close(self) -> None:
        """After the workers are closed: release what the executor holds (a cluster connection)."""
        ...


class LocalExecutor:
    """One shard process per visible GPU (``CUDA_VISIBLE_DEVICES``, else ``nvidia-smi -L``)."""

    label = "local"

    def __init__(self, gpus: int | None = None) -> None:
        self.gpus = gpus  # None: every visible GPU

    def start(self, spec: WorkerSpec, limit: int, out: TextIO) -> list[Worker]:
        slots = gpu_slots.slots(self.gpus)
        if slots == ["cpu"]:
            print("warning: no GPU visible (CUDA_VISIBLE_DEVICES / nvidia-smi -L): tasks can be planned and "
                  "generated but not checked or timed; they will end as no_gpu", file=out, flush=True)
        return [self.worker(spec, slot) for slot in slots[: max(1, limit)]]

    @staticmethod
    def worker(spec: WorkerSpec, slot: str) -> ShardWorker:
        workdir = (spec.run_dir / "work" / slot).resolve()
        return ShardWorker(slot, coder=spec.coder, settings=spec.settings, log_dir=spec.run_dir / "logs",
                           backend=spec.backend, task_timeout_s=spec.task_timeout_s,
                           backend_options=spec.backend_options(workdir))

    def close(self) -> None:
        return None
