"""The Verifier service: one call from a reference and a candidate to a Verdict.

Static checks run here (pure Python); everything that executes code runs in a
worker process (``stitch_lsp.worker``), profiling and sanitizing in further child
processes under ``ncu`` / ``compute-sanitizer``. ``verify`` never raises for
anything a user can cause: a crash, a hang, a missing GPU or a broken file all
come back as a Verdict that says what happened.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import attrs

from stitch_lsp.cancellation import CancelToken, ProgressEvent, Reporter, no_report
from stitch_lsp.pipeline import Candidate
from stitch_lsp.serde import from_dict, from_json, to_json
from stitch_lsp.settings import Settings
from stitch_lsp.verdict import DeviceInfo, Verdict, VerdictStatus
from stitch_lsp.verify.anti_hacking import cuda_flags, settled_by_run, shape_literal_flags, static_flags
from stitch_lsp.contract.verify import VerifyJob, VerifyOptions
from stitch_lsp.verify.spill_report import SpillReport
from stitch_lsp.verify.worker_pool import WorkerDied, WorkerError, WorkerPool

__all__ = ["Verifier", "VerifyOptions", "materialise"]

VERDICT_CACHE_VERSION = "3"  # 3: GPU time with intervals, compile mode, clocks
# Verdicts that depend only on the inputs (a crash or a timeout may not recur).
_CACHEABLE = frozenset({VerdictStatus.CORRECT, VerdictStatus.INCORRECT, VerdictStatus.HACKING,
                        VerdictStatus.COMPILE_ERROR, VerdictStatus.UNVERIFIABLE, VerdictStatus.BAD_INPUT})

_DIED_STATUS = {
    "crashed": VerdictStatus.CRASHED,
    "timeout": VerdictStatus.TIMEOUT,
    "out_of_memory": VerdictStatus.OUT_OF_MEMORY,
    "cancelled": VerdictStatus.CANCELLED,
}


def materialise(workdir: Path, reference_source: str, candidate: Candidate) -> tuple[Path, Path, list[Path]]:
    """Write the job's files under ``workdir/<candidate key>/``: reference.py, candidate.py, its .cu files."""
    job_dir = workdir / f"{candidate.key()}-{_short_hash(reference_source)}"
    if not job_dir.exists():
        prune_job_dirs(workdir, KEEP_JOB_DIRS - 1)
    job_dir.mkdir(parents=True, exist_ok=True)
    job_dir.touch()
    ref_path = job_dir / "reference.py"
    cand_path = job_dir / "candidate.py"
    _write_if_changed(ref_path, reference_source)
    _write_if_changed(cand_path, candidate.module_source)
    cuda_paths = []
    for name, text in sorted(candidate.cuda_sources.items()):
        safe = Path(name).name  # never outside the job folder
        path = job_dir / safe
        _write_if_changed(path, text)
        cuda_paths.append(path)
    return ref_path, cand_path, cuda_paths


KEEP_JOB_DIRS = 64


def prune_job_dirs(workdir: Path, keep: int = KEEP_JOB_DIRS) -> None:
    """Job folders (materialised candidates, tool outputs) beyond the newest ``keep`` go."""
    import shutil

    try:
        dirs = [d for d in workdir.iterdir() if d.is_dir() and "-" in d.name and d.name not in ("worker-logs",)
                and (d / "candidate.py").exists()]
    except OSError:
        return
    dirs.sort(key=lambda d: d.stat().st_mtime, reverse=True)
    for old in dirs[keep:]:
        shutil.rmtree(old, ignore_errors=True)


def measured_now() -> str:
    """The time a verdict is measured, as its cached copies will show it (UTC, to the second)."""
    from datetime import datetime, timezone

    return datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def _short_hash(text: str) -> str:
    import hashlib

    return hashlib.sha256(text.encode()).hexdigest()[:10]


def _write_if_changed(path: Path, text: str) -> None:
    try:
        if path.read_text() == text:
            return
    except OSError:
        pass
    path.write_text(text)


class Verifier:
    def __init__(self, settings: Settings, workdir: Path) -> None:
        self.settings = settings
        self.workdir = Path(workdir)
        self.pool = WorkerPool(settings, self.workdir)
        self._device: DeviceInfo | None | bool = False  # False: not asked yet

    def verify(self, reference_source: str, candidate: Candidate, options: VerifyOptions | None = None, *,
               cancel: CancelToken | None = None, report: Reporter = no_report) -> Verdict:
        options = options or VerifyOptions()
        started = time.perf_counter()
        events_before = len(self.pool.events)
        if not options.allowed_torch_ops and candidate.uncovered_ops:
            options.allowed_torch_ops = list(candidate.uncovered_ops)
        flags = (static_flags(candidate.module_source, options.allowed_torch_ops)
                 + shape_literal_flags(candidate.module_source, reference_source)
                 + cuda_flags(candidate.cuda_sources))
        try:
            ref_path, cand_path, cuda_paths = materialise(self.workdir, reference_source, candidate)
        except OSError as exc:
            return Verdict(status=VerdictStatus.ERROR, summary=f"cannot write the job's files under {self.workdir}: "
                                                                f"{exc}", hack_flags=flags)
        job = VerifyJob(reference_path=str(ref_path), candidate_path=str(cand_path), options=options,
                        cuda_files=[str(p) for p in cuda_paths])
        cache_key = self._cache_key(reference_source, candidate, options)
        if options.use_cache:
            cached = self._cached(cache_key)
            if cached is not None:
                when = f", measured {cached.measured_at}" if cached.measured_at else ""
                cached.events.append("answered from the verdict cache (same reference, candidate, options and GPU"
                                     f"{when})")
                cached.from_cache = True
                cached.seconds = time.perf_counter() - started
                return cached
        report(ProgressEvent("compiling", "starting the worker", 0))
        spills = SpillReport(self.settings, candidate, cancel)
        try:
            data, fresh = self.pool.call_raw("verify", job, timeout_s=options.timeout_s, cancel=cancel, report=report)
            verdict = from_dict(data, Verdict)
            if fresh:
                verdict.events.insert(0, "a fresh worker was started for this job")
        except WorkerDied as died:
            verdict = self._died(died, options)
        except WorkerError as err:
            verdict = Verdict(status=VerdictStatus.ERROR,
                              summary=f"the Verifier failed ({err.error}): {err.message}",
                              events=[err.traceback[-2000:]] if err.traceback else [])
        verdict.events = self.pool.events[events_before:] + verdict.events
        if verdict.status is VerdictStatus.NO_GPU and verdict.compile is None:
            # Nothing was built in the worker; nvcc here still says whether it compiles, and its registers and spills.
            verdict.compile = spills.compile_result()
        else:
            spills.merge(verdict.compile)
        self._merge_static(verdict, flags)
        if options.profile or options.sanitize:
            self._profile_and_sanitize(verdict, job, options, cancel, report)
        verdict.seconds = time.perf_counter() - started
        verdict.cache_key = cache_key
        verdict.measured_at = measured_now()
        verdict.from_cache = False
        if verdict.status in _CACHEABLE:
            self._store(cache_key, verdict)
        return verdict

    def _cache_key(self, reference_source: str, candidate: Candidate, options: VerifyOptions) -> str:
        opts = attrs.evolve(options, use_cache=True, timeout_s=0.0)
        parts = [VERDICT_CACHE_VERSION, reference_source, candidate.key(), to_json(opts),
                 str(self.settings.gpu_index), self.settings.python or sys.executable]
        return _short_hash("\0".join(parts))

    def _cached(self, key: str) -> Verdict | None:
        path = self.workdir / "verdicts" / f"{key}.json"
        try:
            return from_json(path.read_text(), Verdict)
        except (OSError, ValueError, TypeError, KeyError):
            return None
        except Exception:  # a cache from an older format is a miss, not a failure
            return None

    def _store(self, key: str, verdict: Verdict) -> None:
        folder = self.workdir / "verdicts"
        try:
            folder.mkdir(parents=True, exist_ok=True)
            tmp = folder / f".{key}.tmp"
            tmp.write_text(to_json(verdict))
            tmp.replace(folder / f"{key}.json")
        except OSError:
            pass

    @staticmethod
    def _died(died: WorkerDied, options: VerifyOptions) -> Verdict:
        status = _DIED_STATUS.get(died.reason, VerdictStatus.CRASHED)
        if status is VerdictStatus.TIMEOUT:
            summary = f"timeout: no verdict within {options.timeout_s:g} s (a hang or an endless loop); the worker " \
                      "was killed"
        elif status is VerdictStatus.CANCELLED:
            summary = "cancelled"
        elif status is VerdictStatus.OUT_OF_MEMORY:
            summary = f"out of memory: {died.message}"
        else:
            summary = f"crashed: {died.message} (a fault in the kernel or the candidate's code)"
        events = [died.message]
        tail = died.log_tail.strip()
        if tail:
            events.append("worker log (last lines):\n" + "\n".join(tail.splitlines()[-15:]))
        return Verdict(status=status, summary=summary, events=events)

    @staticmethod
    def _merge_static(verdict: Verdict, flags: list) -> None:
        settled = settled_by_run(flags, verdict)
        if len(settled) < len(flags):
            verdict.events.append("static stream flag(s) answered by the run: the profiler saw every side-stream "
                                  "kernel joined back to the caller's stream before forward returned")
        flags = settled
        known = {(f.code, f.line) for f in verdict.hack_flags}
        for flag in flags:
            if (flag.code, flag.line) not in known:
                verdict.hack_flags.append(flag)
        if flags and verdict.status in (VerdictStatus.CORRECT, VerdictStatus.INCORRECT):
            first = flags[0]
            where = f" (line {first.line + 1})" if first.line is not None else ""
            verdict.summary = f"hacking: {first.message}{where}; checks: {verdict.summary}"
            verdict.status = VerdictStatus.HACKING

    def _profile_and_sanitize(self, verdict: Verdict, job: VerifyJob, options: VerifyOptions,
                              cancel: CancelToken | None, report: Reporter) -> None:
        from stitch_lsp.verify import nsight

        reason = ""
        if options.device == "cpu":
            reason = "not run in CPU test mode (Nsight Compute and compute-sanitizer need a GPU)"
        elif verdict.status not in (VerdictStatus.CORRECT, VerdictStatus.INCORRECT, VerdictStatus.HACKING):
            reason = f"not run: the candidate did not get that far ({verdict.status.value})"
        if reason:
            if options.profile:
                verdict.profile.status, verdict.profile.message = "skipped", reason
            if options.sanitize:
                verdict.sanitizer.status, verdict.sanitizer.message = "skipped", reason
            return
        if options.profile:
            report(ProgressEvent("profiling", "Nsight Compute", 0))
            verdict.profile = nsight.profile(self.settings, job, self.workdir, cancel=cancel)
        if options.sanitize:
            report(ProgressEvent("sanitizing", "compute-sanitizer", 0))
            verdict.sanitizer = nsight.sanitize(self.settings, job, self.workdir, cancel=cancel)
            findings = verdict.sanitizer.findings
            if findings and verdict.status is VerdictStatus.CORRECT:
                # Passing trials do not outweigh an out-of-bounds access or a race the tool saw.
                first = findings[0]
                where = f" at {Path(first.file).name}:{first.line + 1}" if first.line is not None else ""
                verdict.status = VerdictStatus.INCORRECT
                verdict.summary = f"incorrect: {first.tool} found {first.kind}{where}; checks: {verdict.summary}"

    def device_info(self) -> DeviceInfo | None:
        if self._device is False:
            try:
                data = self.pool.call_raw("device_info", {"gpu_index": self.settings.gpu_index}, timeout_s=120)[0]
                self._device = from_dict(data.get("device"), DeviceInfo) if data.get("device") else None
            except (WorkerDied, WorkerError):
                self._device = None
        return self._device  # type: ignore[return-value]

    def close(self) -> None:
        self.pool.close()
