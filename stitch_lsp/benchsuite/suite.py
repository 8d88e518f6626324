"""One ``stitch bench`` run from start to end: select, resume, run on every GPU, report."""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path
from typing import Callable, Sequence, TextIO

from attrs import define, field

from stitch_lsp import __version__
from stitch_lsp.benchsuite.executor import Executor, ExecutorError, LocalExecutor, WorkerSpec
from stitch_lsp.benchsuite.results import BenchReport, GpuInfo, RunInfo, TaskDetail, TaskResult
from stitch_lsp.benchsuite.scheduler import Worker, run_tasks
from stitch_lsp.benchsuite.stage_clock import top_steps
from stitch_lsp.benchsuite.shard import DEFAULT_BACKEND
from stitch_lsp.benchsuite.stats import summarise, valid_speedup
from stitch_lsp.benchsuite.store import RunStore
from stitch_lsp.benchsuite.table import _x, render, result_cell
from stitch_lsp.benchsuite.tasks import BenchTask, TaskFilter, discover, interleave, part, select
from stitch_lsp.cancellation import CancelToken
from stitch_lsp.settings import Settings


class BenchError(Exception):
    """A run that cannot start (no tasks, a bad directory, a resume that does not match)."""


@define
class BenchOptions:
    tasks_dir: Path
    run_dir: Path
    coder: str = "template"
    filter: TaskFilter = field(factory=TaskFilter)
    resume: bool = False
    rerun: list[str] = field(factory=list)  # on resume, run again the tasks that ended with these statuses
    gpus: int | None = None  # None: every visible GPU (of this machine, or of the cluster)
    cluster: str | None = None  # None: this machine's GPUs; else a Ray address (ray://HOST:PORT, auto, ...)
    budget_s: float | None = None
    part: tuple[int, int] | None = None  # (I, N): the I-th of N interleaved slices of the selection
    task_timeout_s: float = 900.0
    measure_bandwidth: bool = True
    profile: str = "all"  # Nsight Compute on every candidate (all), on those short of a goal (misses), or none
    sanitize: bool = False
    precision: str = "fp32"  # fp32 | bf16 | fp16: the model and the floating inputs cast (stitch_lsp.task.precision)
    backend: str = DEFAULT_BACKEND
    command: str = ""
    verbose: bool = False
    no_cache: bool = False  # every verdict measured in this run (stitch bench --repeat sets it)


def worker_spec(options: BenchOptions, settings: Settings) -> WorkerSpec:
    return WorkerSpec(coder=options.coder, settings=settings, run_dir=options.run_dir,
                      run_id=options.run_dir.name, tasks_dir=options.tasks_dir, backend=options.backend,
                      profile=options.profile, sanitize=options.sanitize, task_timeout_s=options.task_timeout_s,
                      no_cache=options.no_cache, precision=options.precision)


def _fmt_finished(result: TaskResult) -> str:
    if result.correct:
        parts = [f"{_x(result.speedup_vs_eager, result.speedup_vs_eager_ci)} eager"
                 if valid_speedup(result.speedup_vs_eager) else "",
                 f"{_x(result.speedup_vs_compile, result.speedup_vs_compile_ci)} compile"
                 if valid_speedup(result.speedup_vs_compile) else ""]
        return "correct " + " ".join(p for p in parts if p)
    cell = result_cell(result)
    return cell if len(cell) <= 100 else cell[:99] + "…"


class ProgressPrinter:
    """Listener: a line when a task starts and when it ends, stage changes with --verbose, and
    a heartbeat naming what is still running every ``heartbeat_s`` of a long task."""

    def __init__(self, out: TextIO, store: RunStore, total: int, done: int, verbose: bool,
                 heartbeat_s: float = 30.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.out, self.store, self.total, self.done, self.verbose = out, store, total, done, verbose
        self.results: list[TaskResult] = []
        self._stage: dict[str, str] = {}
        self._running: dict[str, tuple[str, float]] = {}  # task -> (slot, started)
        self.heartbeat_s, self.clock = heartbeat_s, clock
        self._last_beat = clock()

    def tick(self) -> None:
        now = self.clock()
        if not self._running or now - self._last_beat < self.heartbeat_s:
            return
        self._last_beat = now
        busy = ", ".join(f"gpu {slot}: {name} ({self._stage.get(name, 'starting')}, {now - start:.0f} s)"
                         for name, (slot, start) in sorted(self._running.items()))
        self._say(f"          running: {busy}")

    def _say(self, text: str) -> None:
        print(text, file=self.out, flush=True)

    def started(self, slot: str, task: BenchTask) -> None:
        self._running[task.name] = (slot, self.clock())
        self._say(f"[{self.done + 1:>3}/{self.total}] gpu {slot}: {task.name} ...")

    def progress(self, slot: str, task: BenchTask, message: str) -> None:
        stage = message.split(" ", 1)[0]
        if self._stage.get(task.name) != stage:
            self._stage[task.name] = stage
            if self.verbose:
                self._say(f"          gpu {slot}: {task.name}: {message}")

    def finished(self, slot: str, task: BenchTask, result: TaskResult, detail: TaskDetail | None) -> None:
        self.store.save(result, detail)  # first: a Ctrl-C right after must not lose it
        self._running.pop(task.name, None)
        self.results.append(result)
        self.done += 1
        again = f"; ran {len(result.retried) + 1} times" if result.retried else ""
        where = f": {top_steps(result.steps)}" if self.verbose and result.steps else ""
        self._say(f"[{self.done:>3}/{self.total}] gpu {slot}: {task.name}: {_fmt_finished(result)} "
                  f"({result.seconds:.1f} s{again}{where})")

    def lost(self, slot: str, task: BenchTask, reason: str) -> None:
        self._running.pop(task.name, None)
        self._say(f"          gpu {slot}: lost while running {task.name} ({reason}); it goes back in the queue")


def _measure_gpus(workers: Sequence[Worker], cancel: CancelToken, out: TextIO) -> list[GpuInfo]:
    infos: dict[str, GpuInfo] = {}

    def one(worker: Worker) -> None:
        gpu_info = getattr(worker, "gpu_info", None)
        if gpu_info is None:
            infos[worker.slot] = GpuInfo(slot=worker.slot, message="copy bandwidth not measured")
            return
        try:
            infos[worker.slot] = gpu_info(cancel)
        except Exception as exc:
            infos[worker.slot] = GpuInfo(slot=worker.slot, message=f"copy bandwidth not measured: {exc}")

    print(f"measuring copy bandwidth on {len(workers)} GPU(s) ...", file=out, flush=True)
    threads = [threading.Thread(target=one, args=(w,), daemon=True) for w in workers]
    for t in threads:
        t.start()
    for t in threads:
        while t.is_alive():
            t.join(0.1)
    for w in workers:
        info = infos[w.slot]
        text = f"{info.copy_bandwidth_gbs:.0f} GB/s" if info.copy_bandwidth_gbs else info.message
        name = f"{info.device.name}: " if info.device else ""
        print(f"  gpu {w.slot}: {name}{text}", file=out, flush=True)
    return [infos[w.slot] for w in workers]


def _selected(options: BenchOptions, out: TextIO) -> tuple[list[BenchTask], list[BenchTask]]:
    """(every task in the directory, those the filters and --part select); skipped files are reported."""
    found, skipped = discover(options.tasks_dir)
    for message in skipped:
        print(f"skipped {message}", file=out)
    chosen = select(found, options.filter)
    if options.part is not None:
        chosen = part(chosen, *options.part)
    return found, chosen


def list_tasks(options: BenchOptions, out: TextIO) -> int:
    """Print the tasks a run would take (after filters and --part), without running anything."""
    found, chosen = _selected(options, out)
    width = max((len(t.name) for t in chosen), default=4)
    for t in chosen:
        size = f"{t.min_bytes / 1e6:.0f} MB" if t.min_bytes else ""
        print(f"{t.name:<{width}}  level {t.level if t.level is not None else '?'}  {t.expected_bound or '?':<7}  "
              f"{size:>7}  {','.join(t.tags)}", file=out)
    print(f"{len(chosen)} of {len(found)} tasks", file=out)
    return len(chosen)


def run_bench(options: BenchOptions, settings: Settings, out: TextIO = sys.stdout,
              executor: Executor | None = None, cancel: CancelToken | None = None) -> BenchReport:
    """Run the selected tasks on ``executor`` (default: from ``options.cluster``) and report them."""
    executor = executor or make_executor(options.cluster, options.gpus)
    try:
        return _run(options, settings, out, executor, cancel or CancelToken())
    finally:
        executor.close()


def _run(options: BenchOptions, settings: Settings, out: TextIO, executor: Executor,
         cancel: CancelToken) -> BenchReport:
    found, chosen = _selected(options, out)
    if not chosen:
        raise BenchError(f"no tasks in {options.tasks_dir} match the filters" if found
                         else f"no KernelBench tasks in {options.tasks_dir}")

    store = RunStore(options.run_dir)
    previous: dict[str, TaskResult] = {}
    info = store.load_info()
    if options.resume:
        if info is None:
            raise BenchError(f"nothing to resume in {options.run_dir} (no run.json)")
        if info.coder != options.coder:
            raise BenchError(f"{options.run_dir} was run with --coder {info.coder}; resume it with the same coder")
        if (info.precision or "fp32") != options.precision:
            raise BenchError(f"{options.run_dir} was run with --precision {info.precision or 'fp32'}; resume it with "
                             "the same precision")
        previous = {n: r for n, r in store.finished().items()
                    if n in {t.name for t in chosen} and r.status not in options.rerun}
    elif info is not None:
        raise BenchError(f"{options.run_dir} already holds a run: add --resume to continue it, or pick another --out")

    run = RunInfo(
        run_id=options.run_dir.name,
        tasks_dir=str(options.tasks_dir),
        command=options.command,
        coder=options.coder,
        started=time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        filters=_describe_filter(options.filter, options.part),
        stitch_version=__version__,
        precision=options.precision,
    )
    if options.resume and info is not None:
        run.started, run.gpus = info.started, info.gpus
    todo = interleave([t for t in chosen if t.name not in previous])
    workers: list[Worker] = []
    if todo:
        try:
            workers = executor.start(worker_spec(options, settings), len(todo), out)
        except ExecutorError as exc:
            raise BenchError(str(exc)) from None
        except KeyboardInterrupt:  # while connecting to a cluster or starting its workers
            cancel.cancel("interrupted")
    run.executor = executor.label if workers else (info.executor if info else "")
    store.save_info(run)
    where = "" if executor.label == "local" else f" ({executor.label})"
    print(f"stitch bench: {len(chosen)} tasks ({len(previous)} already done), coder {options.coder}, "
          + (f"precision {options.precision}, " if options.precision != "fp32" else "")
          + (f"{len(workers)} worker(s) on GPU {', '.join(w.slot for w in workers)}{where}; " if workers else
             "interrupted while its workers started; " if todo else "nothing to run; ")
          + f"results in {options.run_dir}", file=out, flush=True)

    started = time.monotonic()
    if options.measure_bandwidth and todo:
        try:
            run.gpus = _measure_gpus(workers, cancel, out)
        except KeyboardInterrupt:
            cancel.cancel("interrupted")
        store.save_info(run)
    if cancel.cancelled or not todo:  # nothing (more) to run: the workers go
        for worker in workers:
            worker.close()
        todo = []
    printer = ProgressPrinter(out, store, total=len(chosen), done=len(previous), verbose=options.verbose)
    budget = None if options.budget_s is None else max(0.0, options.budget_s - (time.monotonic() - started))
    outcome = run_tasks(todo, workers, printer, cancel, budget_s=budget) if todo else None
    for error in outcome.errors if outcome else []:
        print(f"warning: {error}", file=out)

    for r in printer.results:  # rows of tasks that never reached the Coder (a lost worker) carry it too
        r.precision = r.precision or options.precision
    results = {**previous, **{r.name: r for r in printer.results}}
    ordered = [results[t.name] for t in chosen if t.name in results]
    copy_gbs = next((g.copy_bandwidth_gbs for g in run.gpus if g.copy_bandwidth_gbs), None)
    run.finished = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    run.interrupted = cancel.cancelled
    run.stopped_by_budget = bool(outcome and outcome.stopped_by_budget)
    report = BenchReport(
        run=run,
        summary=summarise(ordered, total=len(chosen), copy_gbs=copy_gbs),
        results=ordered,
        not_run=[t.name for t in chosen if t.name not in results],
    )
    store.save_info(run)
    store.save_report(report, render(report))
    return report


def _describe_filter(flt: TaskFilter, part: tuple[int, int] | None = None) -> str:
    parts = []
    if flt.levels:
        parts.append("levels " + ",".join(map(str, flt.levels)))
    if flt.tags:
        parts.append("tags " + ",".join(flt.tags))
    if flt.globs:
        parts.append("tasks " + ",".join(flt.globs))
    if part is not None:
        parts.append(f"part {part[0]}/{part[1]}")
    return "; ".join(parts)


def make_executor(cluster: str | None, gpus: int | None = None) -> Executor:
    """Which executor runs a bench. ``cluster``: None for this machine; a Ray address (``ray://HOST:PORT``,
    ``HOST:PORT``, ``auto``): the Ray executor's module is imported only then."""
    if cluster is None:
        return LocalExecutor(gpus)
    from stitch_lsp.benchsuite.ray_executor import RayExecutor

    return RayExecutor(cluster, gpus=gpus)
