"""Compile a CUDA buffer with nvcc: diagnostics, per-kernel resources, nothing run.

``compile_cuda`` writes the buffer (not the file on disk: the user may compile
what they just saved, or the CLI a file) to a private temporary directory and
runs ``nvcc -c -x cu -o <tmp> -lineinfo -Xptxas -v -arch=<arch>`` with the
document's own directory first on the include path, so ``#include "x.cuh"`` still
finds its neighbours. nvcc runs in its own process group with a timeout; on a
timeout or a cancel the whole group is killed, so a hanging nvcc leaves nothing
behind. The GPU architecture comes from settings, else ``nvidia-smi`` (never
torch), else sm_90.
"""

from __future__ import annotations

import errno
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from functools import lru_cache
from pathlib import Path

from attrs import define, field, frozen

from stitch_lsp.cancellation import CancelToken
from stitch_lsp.child_env import tool_env
from stitch_lsp.findings import Finding, Position, Range, Severity
from stitch_lsp.settings import Settings
from stitch_lsp.verdict import CompileResult
from stitch_lsp.verify.nvcc_diagnostics import parse_nvcc_output, to_findings
from stitch_lsp.verify.ptxas_report import PtxasReport, parse_ptxas

DEFAULT_ARCH = "sm_90"


# -- tools ---------------------------------------------------------------------------------
@frozen
class NvccInfo:
    path: str
    version: str  # "13.0.88"


@frozen
class GpuInfo:
    name: str
    compute_capability: str  # "9.0"

    @property
    def arch(self) -> str:
        return "sm_" + self.compute_capability.replace(".", "")


def find_nvcc(nvcc_path: str = "nvcc") -> str | None:
    """The nvcc executable that ``nvcc_path`` names (a name on PATH or a path), or None."""
    if not nvcc_path:
        nvcc_path = "nvcc"
    expanded = os.path.expanduser(nvcc_path)
    if os.sep in expanded or (os.altsep and os.altsep in expanded):
        # Absolute: compiles run in temporary folders, and a relative path means the server's folder
        # (the workspace the editor started it in).
        expanded = os.path.abspath(expanded)
        return expanded if os.path.isfile(expanded) and os.access(expanded, os.X_OK) else None
    found = shutil.which(expanded)
    if found:
        return found
    cuda_home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    if cuda_home and expanded == "nvcc":
        candidate = os.path.join(cuda_home, "bin", "nvcc")
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return None


@lru_cache(maxsize=8)
def _nvcc_version_of(path: str) -> NvccInfo | None:
    try:
        out = run_process_group([path, "--version"], timeout=15)
    except OSError:
        return None
    for line in out.stdout.splitlines():
        if "release" in line and ", V" in line:
            return NvccInfo(path, line.rsplit(", V", 1)[1].strip())
    return NvccInfo(path, "") if out.returncode == 0 else None


def nvcc_version(nvcc_path: str = "nvcc") -> NvccInfo | None:
    path = find_nvcc(nvcc_path)
    return _nvcc_version_of(path) if path else None


_gpu_lock = threading.Lock()
_gpu_cache: list[GpuInfo | None] = []


def detect_gpu(index: int = 0) -> GpuInfo | None:
    """The GPU ``nvidia-smi`` reports (asked once per process); None where there is none."""
    with _gpu_lock:
        if _gpu_cache:
            return _gpu_cache[0]
        info = None
        tool = shutil.which("nvidia-smi")
        if tool:
            try:
                out = run_process_group(
                    [tool, "--query-gpu=name,compute_cap", "--format=csv,noheader"], timeout=10
                )
                rows = [r.split(",") for r in out.stdout.strip().splitlines() if "," in r]
                if out.returncode == 0 and rows:
                    name, cap = rows[min(index, len(rows) - 1)][:2]
                    info = GpuInfo(name.strip(), cap.strip())
            except OSError:
                info = None
        _gpu_cache.append(info)
        return info


def detect_arch(settings: Settings) -> str:
    if settings.arch:
        arch = settings.arch.strip()
        return arch if arch.startswith(("sm_", "compute_")) else "sm_" + arch.replace(".", "")
    gpu = detect_gpu(settings.gpu_index)
    return gpu.arch if gpu else DEFAULT_ARCH


# -- running a process group ------------------------------------------------------------------
@frozen
class ProcessOutput:
    returncode: int | None
    stdout: str
    stderr: str
    seconds: float
    timed_out: bool = False
    cancelled: bool = False


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def run_process_group(
    cmd: list[str],
    *,
    timeout: float,
    cwd: str | None = None,
    token: CancelToken | None = None,
    env: dict[str, str] | None = None,
) -> ProcessOutput:
    """Run ``cmd`` in a new session; kill its whole process group on timeout or cancel.
    ``env``: default the allowlisted tool environment (child_env), never the server's own."""
    start = time.monotonic()
    proc = subprocess.Popen(
        cmd,
        cwd=cwd,
        env=tool_env() if env is None else env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    unregister = token.on_cancel(lambda: _kill_group(proc)) if token is not None else (lambda: None)
    timed_out = False
    try:
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            _kill_group(proc)
            out, err = proc.communicate()
    finally:
        unregister()
        if proc.poll() is None:
            _kill_group(proc)
            proc.wait()
        else:
            # nvcc's children (cicc, ptxas) share its group: make sure none outlive it.
            _kill_group(proc)
    return ProcessOutput(
        returncode=proc.returncode,
        stdout=out.decode("utf-8", "replace"),
        stderr=err.decode("utf-8", "replace"),
        seconds=time.monotonic() - start,
        timed_out=timed_out,
        cancelled=bool(token is not None and token.cancelled),
    )


# -- compiling ---------------------------------------------------------------------------------
@define
class NvccOutcome:
    """What one nvcc run gave: the compile result, or why there is none."""

    # ok | failed (compile errors) | missing (no nvcc) | timeout | cancelled | no_space | error
    status: str
    result: CompileResult = field(factory=lambda: CompileResult(ok=False, backend="nvcc"))
    ptxas: PtxasReport = field(factory=PtxasReport)
    message: str = ""  # for the user, when status is not ok / failed
    command: list[str] = field(factory=list)
    arch: str = ""


def build_command(
    nvcc: str, source: str, obj: str, settings: Settings, arch: str, doc_dir: str | None, root: Path | None
) -> list[str]:
    cmd = [nvcc, "-c", "-x", "cu", "-o", obj, "-lineinfo", "-Xptxas", "-v", f"-arch={arch}"]
    if doc_dir:
        cmd.append(f"-I{doc_dir}")
    for inc in settings.include_paths:
        path = Path(os.path.expanduser(inc))
        if not path.is_absolute() and root is not None:
            path = root / path
        cmd.append(f"-I{path}")
    cmd.extend(settings.extra_flags)
    cmd.append(source)
    return cmd


def _space_message(exc: OSError, where: str) -> str:
    if exc.errno == errno.ENOSPC:
        return (
            f"nvcc was not run: no space left for temporary files in {where}. "
            "Free some disk space or point TMPDIR at a disk with room."
        )
    return f"nvcc was not run: could not write temporary files in {where}: {exc.strerror or exc}."


def compile_cuda(
    text: str,
    path: str,
    settings: Settings,
    *,
    root: Path | None = None,
    token: CancelToken | None = None,
) -> NvccOutcome:
    """Compile ``text`` (the contents of ``path``) with nvcc; never raises for user-caused problems."""
    nvcc = find_nvcc(settings.nvcc_path)
    if nvcc is None:
        where = settings.nvcc_path or "nvcc"
        return NvccOutcome(
            status="missing",
            message=(
                f"Stitch could not find nvcc ('{where}'): compile errors and register / shared-memory "
                "figures need the CUDA toolkit. Install it or set stitch.nvccPath."
            ),
        )
    arch = detect_arch(settings)
    doc_dir = os.path.dirname(os.path.abspath(path)) if path else None
    tmp_root = tempfile.gettempdir()
    try:
        workdir = tempfile.mkdtemp(prefix="stitch-nvcc-")
    except OSError as exc:
        return NvccOutcome(status="no_space", message=_space_message(exc, tmp_root), arch=arch)
    try:
        name = os.path.basename(path) or "buffer.cu"
        source = os.path.join(workdir, name)
        unit = source
        try:
            with open(source, "w", encoding="utf-8", errors="surrogateescape") as fh:
                fh.write(text)
            if not name.lower().endswith(".cu"):
                # A header is checked the way it is used: included by a translation unit.
                unit = os.path.join(workdir, "stitch_header_check.cu")
                with open(unit, "w", encoding="utf-8") as fh:
                    fh.write(f'#include "{name}"\n')
        except OSError as exc:
            return NvccOutcome(status="no_space", message=_space_message(exc, workdir), arch=arch)
        obj = os.path.join(workdir, "out.o")
        cmd = build_command(nvcc, unit, obj, settings, arch, doc_dir, root)
        try:
            out = run_process_group(cmd, timeout=settings.compile_timeout_s, cwd=workdir, token=token,
                                    env=tool_env(settings.extra_env))
        except OSError as exc:
            return NvccOutcome(status="error", message=f"nvcc could not be started: {exc}", command=cmd, arch=arch)
        log = out.stderr + ("\n" + out.stdout if out.stdout else "")
        if out.cancelled:
            return NvccOutcome(status="cancelled", message="nvcc was cancelled", command=cmd, arch=arch)
        if out.timed_out:
            return NvccOutcome(
                status="timeout",
                message=(
                    f"nvcc did not finish within {settings.compile_timeout_s:g} s and was stopped "
                    "(stitch.compileTimeoutS)."
                ),
                command=cmd,
                arch=arch,
            )
        messages = parse_nvcc_output(log)
        findings = to_findings(messages, compiled_file=source, display_path=path, source_text=text, cwd=workdir)
        ptxas = parse_ptxas(log)
        ok = out.returncode == 0
        if not ok and not any(f.severity is Severity.ERROR for f in findings) and not ptxas.errors:
            # nvcc failed without a message we understand: show its output rather than nothing.
            tail = "\n".join(log.strip().splitlines()[-5:]) or f"exit status {out.returncode}"
            findings.append(
                Finding(
                    path=path,
                    range=Range(Position(0, 0), Position(0, 0)),
                    severity=Severity.ERROR,
                    code="nvcc",
                    message=f"nvcc failed: {tail}",
                    source="nvcc",
                )
            )
        result = CompileResult(
            ok=ok,
            backend="nvcc",
            seconds=out.seconds,
            diagnostics=findings,
            kernels=ptxas.kernels,
            log=log,
        )
        return NvccOutcome(status="ok" if ok else "failed", result=result, ptxas=ptxas, command=cmd, arch=arch)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
