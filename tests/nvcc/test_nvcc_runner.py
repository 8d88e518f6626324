"""Running nvcc: process groups and timeouts, a missing compiler, a full disk, real compiles."""

from __future__ import annotations

import errno
import os
import tempfile
import time
from pathlib import Path

import pytest

from stitch_lsp.cancellation import CancelToken
from stitch_lsp.settings import Settings
from stitch_lsp.verify import nvcc as nvcc_mod
from stitch_lsp.verify.nvcc import build_command, compile_cuda, detect_arch, run_process_group

CLEAN = "__global__ void k(float* y, int n) { int i = threadIdx.x; if (i < n) y[i] = 1.0f; }\n"


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def test_timeout_kills_the_whole_group(tmp_path):
    pidfile = tmp_path / "child.pid"
    script = f"sleep 300 & echo $! > {pidfile}; sleep 300"
    start = time.monotonic()
    out = run_process_group(["sh", "-c", script], timeout=1.0)
    assert out.timed_out and time.monotonic() - start < 10
    child = int(pidfile.read_text())
    deadline = time.monotonic() + 5
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(child), "the grandchild survived the timeout"


def test_cancel_kills_the_group():
    token = CancelToken()
    import threading

    threading.Timer(0.5, token.cancel).start()
    out = run_process_group(["sleep", "300"], timeout=60, token=token)
    assert out.cancelled and not out.timed_out


def test_missing_nvcc_is_a_status_not_an_exception(tmp_path):
    outcome = compile_cuda(CLEAN, str(tmp_path / "k.cu"), Settings(nvcc_path=str(tmp_path / "nope")))
    assert outcome.status == "missing"
    assert "stitch.nvccPath" in outcome.message


def test_full_disk_gives_a_clear_message(tmp_path, monkeypatch):
    fake = tmp_path / "nvcc"
    fake.write_text("#!/bin/sh\nexit 0\n")
    fake.chmod(0o755)

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(tempfile, "mkdtemp", full)
    outcome = compile_cuda(CLEAN, str(tmp_path / "k.cu"), Settings(nvcc_path=str(fake), arch="sm_90"))
    assert outcome.status == "no_space"
    assert "no space left for temporary files" in outcome.message


def test_command_line(tmp_path):
    settings = Settings(include_paths=["inc", "/abs/inc"], extra_flags=["-O3"], arch="sm_80")
    cmd = build_command("nvcc", "/t/k.cu", "/t/k.o", settings, detect_arch(settings), "/src", tmp_path)
    assert cmd[:10] == ["nvcc", "-c", "-x", "cu", "-o", "/t/k.o", "-lineinfo", "-Xptxas", "-v", "-arch=sm_80"]
    assert cmd[10:] == ["-I/src", f"-I{tmp_path / 'inc'}", "-I/abs/inc", "-O3", "/t/k.cu"]
    assert detect_arch(Settings(arch="90")) == "sm_90"


def test_arch_falls_back_to_sm_90_without_a_gpu(monkeypatch):
    monkeypatch.setattr(nvcc_mod, "detect_gpu", lambda index=0: None)
    assert detect_arch(Settings()) == "sm_90"


@pytest.mark.nvcc
def test_compiles_the_buffer_with_relative_includes(tmp_path, monkeypatch):
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    (tmp_path / "inc").mkdir()
    (tmp_path / "inc" / "scale.cuh").write_text("#pragma once\n__device__ inline float twice(float x) { return 2 * x; }\n")
    doc = tmp_path / "k.cu"
    doc.write_text("this text on disk is not what gets compiled\n")
    text = '#include "inc/scale.cuh"\n__global__ void k(float* y) { y[threadIdx.x] = twice(y[threadIdx.x]); }\n'
    outcome = compile_cuda(text, str(doc), Settings(arch="sm_90"))
    assert outcome.status == "ok", outcome.result.log
    assert [k.name for k in outcome.result.kernels] == ["k"]
    assert list(scratch.iterdir()) == [], "the temporary copy was left behind"


@pytest.mark.nvcc
def test_header_is_checked_as_included(tmp_path):
    header = tmp_path / "h.cuh"
    text = "#pragma once\n__device__ inline float f(int i) { return i * missing; }\n"
    outcome = compile_cuda(text, str(header), Settings(arch="sm_90"))
    assert outcome.status == "failed"
    (f,) = outcome.result.diagnostics
    assert (f.range.start.line, f.range.start.character) == (1, text.split("\n")[1].index("missing"))
    assert "pragma once" not in " ".join(d.message for d in outcome.result.diagnostics)
