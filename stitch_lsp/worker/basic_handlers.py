"""Small request kinds: ``ping``, ``device_info`` and ``test_crash`` (CPU stand-ins for failures)."""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import time
from typing import Any

from stitch_lsp.verdict import DeviceInfo


def handle_ping(payload: Any, ctx) -> Any:
    return {"echo": payload, "pid": os.getpid()}


def describe_device(gpu_index: int = 0) -> DeviceInfo | None:
    import torch

    if not torch.cuda.is_available() or gpu_index >= torch.cuda.device_count():
        return None
    props = torch.cuda.get_device_properties(gpu_index)
    driver = ""
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader", f"--id={gpu_index}"],
            capture_output=True, text=True, timeout=20,
        )
        driver = out.stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        pass
    return DeviceInfo(
        name=props.name,
        index=gpu_index,
        compute_capability=f"{props.major}.{props.minor}",
        sm_count=props.multi_processor_count,
        driver=driver,
        cuda=torch.version.cuda or "",
        torch=torch.__version__,
    )


def handle_device_info(payload: Any, ctx) -> Any:
    index = int((payload or {}).get("gpu_index", 0))
    key = f"device_info:{index}"
    if key not in ctx.state:
        ctx.state[key] = describe_device(index)
    info = ctx.state[key]
    return {"device": info}


def handle_test_crash(payload: Any, ctx) -> Any:
    """Fail on purpose, as a broken kernel would; used by the pool's tests (no GPU needed)."""
    mode = (payload or {}).get("mode", "")
    if mode == "abort":
        os.abort()
    if mode == "segfault":
        ctypes.string_at(0)
    if mode == "exit":
        os._exit(3)
    if mode == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    if mode == "hang":
        while True:
            time.sleep(1)
    if mode == "child_hang":
        # A grandchild that outlives its parent unless the whole process group is killed.
        proc = subprocess.Popen(["sleep", "1000"])
        ctx.state["child_pid"] = proc.pid
        ctx.progress("started", str(proc.pid))
        while True:
            time.sleep(1)
    if mode == "memory":
        raise MemoryError("stand-in for an allocation that failed")
    if mode == "raise":
        raise ValueError("stand-in handler bug")
    if mode == "modules":
        import sys

        return {"loaded": sorted(m for m in sys.modules if m.split(".")[0] in ("pygls", "lsprotocol")
                                 or m.startswith("stitch_lsp.lsp")),
                # References and candidates of finished jobs (none should stay).
                "job_modules": sorted(m for m in sys.modules if m.startswith("_stitch_"))}
    if mode == "env":
        return {"env": {k: v for k, v in os.environ.items() if "KEY" in k or "TOKEN" in k}}
    return {"mode": mode}
