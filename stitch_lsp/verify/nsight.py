"""Nsight Compute profiling and compute-sanitizer runs of a verify job, in child processes.

Each tool runs ``python -m stitch_lsp.worker.run_target`` (one warm-up forward, then
one forward inside an NVTX range) in its own process group, killed on timeout or
cancel. A missing tool, refused counters or a crash in the target are a Profile /
Sanitizer with status "skipped" or "error" and the reason, never an exception.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from stitch_lsp.cancellation import CancelToken
from stitch_lsp.serde import to_json
from stitch_lsp.settings import Settings
from stitch_lsp.verdict import Profile, Sanitizer
from stitch_lsp.verify.ncu_report import parse_details_csv
from stitch_lsp.contract import RUN_TARGET
from stitch_lsp.contract.verify import VerifyJob
from stitch_lsp.verify.sanitizer_report import error_count, map_to_candidate, parse_sanitizer
from stitch_lsp.child_env import worker_env

NCU_SECTIONS = ["SpeedOfLight", "Occupancy", "LaunchStats", "MemoryWorkloadAnalysis", "SpeedOfLight_RooflineChart"]
MAX_PROFILED_KERNELS = 16
_REFUSED = ("ERR_NVGPUCTRPERM", "does not have permission", "profiling is not supported", "Profiling is not allowed")


def _run(cmd: list[str], env: dict[str, str], cwd: Path, timeout_s: float,
         cancel: CancelToken | None) -> tuple[int | None, str, str]:
    """(returncode or None on timeout/cancel, stdout, why it stopped)."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=str(cwd), env=env,
                            start_new_session=True, text=True, errors="replace")

    def kill() -> None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass

    unregister = cancel.on_cancel(kill) if cancel else (lambda: None)
    try:
        out, _ = proc.communicate(timeout=timeout_s)
        if cancel is not None and cancel.cancelled:
            return None, out or "", "cancelled"
        return proc.returncode, out or "", ""
    except subprocess.TimeoutExpired:
        kill()
        out, _ = proc.communicate()
        return None, out or "", f"timed out after {timeout_s:g} s"
    finally:
        unregister()


def _keep(job: VerifyJob, name: str, cmd: list[str], out: str) -> None:
    """The tool's raw output next to the job's files, with the command that made it."""
    try:
        Path(job.candidate_path).with_name(name).write_text(f"$ {shlex.join(cmd)}\n{out}")
    except OSError:
        pass


def _job_file(job: VerifyJob, workdir: Path, tag: str) -> Path:
    path = Path(job.candidate_path).with_name(f"job-{tag}.json")
    path.write_text(to_json(job))
    return path


def _target(settings: Settings, job_path: Path, role: str, result: Path, small: bool) -> list[str]:
    cmd = [settings.python or sys.executable, "-m", RUN_TARGET, str(job_path), "--role", role,
           "--result", str(result)]
    return cmd + (["--small"] if small else [])


def _target_failure(result: Path) -> str:
    try:
        data = json.loads(result.read_text())
    except (OSError, ValueError):
        return "the target did not report back"
    return "" if data.get("ok") else data.get("error", "the target failed")


def profile(settings: Settings, job: VerifyJob, workdir: Path, *, cancel: CancelToken | None = None,
            roles: tuple[str, ...] = ("candidate", "reference")) -> Profile:
    """Nsight Compute over the candidate's forward and then the reference's (``roles``: which)."""
    ncu = shutil.which("ncu")
    if ncu is None:
        return Profile(status="skipped", message="ncu (Nsight Compute) is not on PATH: no profile")
    job_path = _job_file(job, workdir, "profile")
    kernels = []
    commands = []
    notes = []
    started = time.monotonic()
    for role in roles:
        remaining = settings.profile_timeout_s - (time.monotonic() - started)
        if remaining < 10:
            notes.append(f"{role}: not profiled (out of time)")
            continue
        result = job_path.with_name(f"profile-{role}.json")
        # Clocks as the timed runs and the copy bandwidth see them: ncu's default locks them to base, which
        # slows latency-bound kernels by a few percent against figures measured beside them.
        cmd = [ncu, "--clock-control", "none", *sum((["--section", s] for s in NCU_SECTIONS), []), "--nvtx", "--nvtx-include",
               f"stitch_{role}/", "--launch-count", str(MAX_PROFILED_KERNELS), "--csv", "--page", "details",
               "--print-units", "base", "--print-details", "all",
               *_target(settings, job_path, role, result, small=False)]
        commands.append(shlex.join(cmd))
        code, out, why = _run(cmd, worker_env(), Path(job.candidate_path).parent, remaining, cancel)
        _keep(job, f"ncu-{role}.txt", cmd, out)
        if why:
            return Profile(status="error", message=f"ncu {why}", command=commands[-1])
        if any(marker in out for marker in _REFUSED):
            return Profile(status="error", command=commands[-1],
                           message="ncu was refused access to the GPU performance counters (ERR_NVGPUCTRPERM): "
                                   "run as root or allow profiling for all users (NVreg_RestrictProfilingToAdminUsers=0)")
        failure = _target_failure(result)
        if failure:
            return Profile(status="error", message=f"the {role} failed under ncu: {failure}", command=commands[-1])
        found = parse_details_csv(out, role=role)
        if not found and code == 0:
            # Without the NVTX filter: the warm-up and the measured forward launch the same
            # kernels, so the second half of what ncu saw is the measured forward.
            cmd = [c for c in cmd if c not in ("--nvtx", "--nvtx-include", f"stitch_{role}/")]
            cmd[cmd.index("--launch-count") + 1] = str(2 * MAX_PROFILED_KERNELS)
            commands.append(shlex.join(cmd))
            remaining = settings.profile_timeout_s - (time.monotonic() - started)
            code, out, why = _run(cmd, worker_env(), Path(job.candidate_path).parent, max(10.0, remaining), cancel)
            _keep(job, f"ncu-{role}-unfiltered.txt", cmd, out)
            every = parse_details_csv(out, role=role)
            found = every[len(every) // 2:]
            if found:
                notes.append(f"{role}: the NVTX filter matched nothing; took the second half of {len(every)} kernels")
        if not found:
            notes.append(f"{role}: ncu recorded no kernels (rc {code})"
                         + (" — PyTorch-only work or launches outside the range" if role == "candidate" else ""))
        kernels.extend(found)
    status = "profiled" if kernels else "error"
    message = "; ".join(notes) if notes else f"{len(kernels)} kernel(s) profiled"
    return Profile(status=status, kernels=kernels, message=message, command=" && ".join(commands))


def sanitize(settings: Settings, job: VerifyJob, workdir: Path, *, cancel: CancelToken | None = None) -> Sanitizer:
    tool = shutil.which("compute-sanitizer")
    if tool is None:
        return Sanitizer(status="skipped", message="compute-sanitizer is not on PATH: not run")
    job_path = _job_file(job, workdir, "sanitize")
    files = [job.candidate_path, *job.cuda_files]
    env = worker_env({
        "STITCH_KERNEL_LINEINFO": "1",  # so findings carry file:line
        # One cudaMalloc per tensor: an overrun past a tensor leaves its allocation
        # instead of landing in the caching allocator's slack.
        "PYTORCH_NO_CUDA_MEMORY_CACHING": "1",
    })
    findings = []
    notes = []
    started = time.monotonic()
    for check in job.options.sanitizer_tools or ["memcheck", "racecheck"]:
        remaining = settings.verify_timeout_s - (time.monotonic() - started)
        result = job_path.with_name(f"sanitize-{check}.json")
        cmd = [tool, "--tool", check, "--print-limit", "20"]
        # --padding: a guard zone after every allocation, so a write one element past a
        # tensor is reported even where cudaMalloc's rounding would have hidden it.
        if check == "memcheck":
            cmd += ["--padding", "64"]
        cmd += _target(settings, job_path, "candidate", result, True)
        code, out, why = _run(cmd, env, Path(job.candidate_path).parent, max(10.0, remaining), cancel)
        _keep(job, f"sanitizer-{check}.txt", cmd, out)
        if why:
            return Sanitizer(status="error", findings=findings, message=f"compute-sanitizer {check} {why}")
        found = parse_sanitizer(out, check)
        for f in found:
            map_to_candidate(f, files)
        findings.extend(found)
        failure = _target_failure(result)
        if failure and not found:
            notes.append(f"{check}: the candidate failed under the sanitizer: {failure[:300]}")
        try:
            note = json.loads(result.read_text()).get("note", "")
        except (OSError, ValueError):
            note = ""
        if note and note not in notes:
            notes.append(note)
        if error_count(out) is None and not found:
            notes.append(f"{check}: no summary in its output (rc {code})")
    status = "findings" if findings else ("error" if any("failed" in n for n in notes) else "clean")
    return Sanitizer(status=status, findings=findings, message="; ".join(notes))
