"""The GPU's clocks and the other processes on it, read around a timing run (NVML).

NVML through ``pynvml`` (the nvidia-ml-py package, which torch uses for the same
purpose) when it imports, else one ``nvidia-smi`` query. A run whose SM or memory
clock moved, that the driver throttled for power or heat, or that shared the GPU with
another process, says so in its verdict: its ratios may not repeat.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass, field
from typing import Any

from stitch_lsp.verdict import ClockNotes

CLOCK_MOVE = 0.05  # a clock that moved more than this (relative) during the run is flagged
# NVML clock event ("throttle") reasons that slow the GPU for reasons other than idling.
_SLOWDOWNS = {0x4: "software power cap", 0x8: "hardware slowdown", 0x20: "software thermal slowdown",
              0x40: "hardware thermal slowdown", 0x80: "hardware power brake"}


@dataclass
class Snapshot:
    sm_mhz: int | None = None
    mem_mhz: int | None = None
    sm_max_mhz: int | None = None
    slowdowns: list[str] = field(default_factory=list)
    others: list[str] = field(default_factory=list)  # "pid 123 (2048 MiB)"
    source: str = ""
    error: str = ""


def _nvml_handle(device: int) -> Any:
    import pynvml  # noqa: F401 - the import is the availability check
    import torch

    getter = getattr(torch.cuda, "_get_pynvml_handler", None)
    if getter is not None:
        return getter(device)  # maps CUDA_VISIBLE_DEVICES to NVML's numbering
    pynvml.nvmlInit()
    return pynvml.nvmlDeviceGetHandleByIndex(device)


def _by_nvml(device: int) -> Snapshot:
    import pynvml

    h = _nvml_handle(device)
    snap = Snapshot(source="NVML")
    snap.sm_mhz = int(pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM))
    snap.mem_mhz = int(pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_MEM))
    snap.sm_max_mhz = int(pynvml.nvmlDeviceGetMaxClockInfo(h, pynvml.NVML_CLOCK_SM))
    reasons_fn = (getattr(pynvml, "nvmlDeviceGetCurrentClocksEventReasons", None)
                  or getattr(pynvml, "nvmlDeviceGetCurrentClocksThrottleReasons"))
    reasons = int(reasons_fn(h))
    snap.slowdowns = [name for bit, name in _SLOWDOWNS.items() if reasons & bit]
    procs = pynvml.nvmlDeviceGetComputeRunningProcesses(h)
    snap.others = _others([(p.pid, (p.usedGpuMemory or 0) >> 20) for p in procs])
    return snap


def _others(procs: list[tuple[int, int]]) -> list[str]:
    """Processes other than this worker. In a container NVML may report the host's process ids; then
    this worker is not among them, and one process is taken to be it."""
    mine = os.getpid()
    pids = [p for p, _ in procs]
    rest = [(p, mib) for p, mib in procs if p != mine]
    if mine not in pids and rest:
        rest = rest[1:]
    return [f"pid {p} ({mib} MiB)" for p, mib in rest]


def _by_nvidia_smi(device: int) -> Snapshot:
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return Snapshot(error="no NVML (pynvml) and no nvidia-smi: clocks not recorded")
    idx = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")
    target = idx[device].strip() if device < len(idx) and idx[device].strip() else str(device)
    q = ["--query-gpu=clocks.sm,clocks.mem,clocks.max.sm,clocks_event_reasons.active",
         "--format=csv,noheader,nounits", "-i", target]
    out = subprocess.run([exe, *q], capture_output=True, text=True, timeout=10).stdout.strip()
    snap = Snapshot(source="nvidia-smi")
    parts = [p.strip() for p in out.split(",")]
    if len(parts) >= 3:
        snap.sm_mhz, snap.mem_mhz, snap.sm_max_mhz = (int(float(p)) if p.replace(".", "").isdigit() else None
                                                      for p in parts[:3])
    if len(parts) >= 4 and parts[3].startswith("0x"):
        reasons = int(parts[3], 16)
        snap.slowdowns = [name for bit, name in _SLOWDOWNS.items() if reasons & bit]
    apps = subprocess.run([exe, "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits",
                           "-i", target], capture_output=True, text=True, timeout=10).stdout
    procs = []
    for line in apps.splitlines():
        fields = [f.strip() for f in line.split(",")]
        if len(fields) == 2 and fields[0].isdigit():
            procs.append((int(fields[0]), int(fields[1]) if fields[1].isdigit() else 0))
    snap.others = _others(procs)
    return snap


def snapshot(device: int) -> Snapshot:
    try:
        return _by_nvml(device)
    except Exception:  # noqa: BLE001 - no pynvml, or NVML refused: try the command line
        pass
    try:
        return _by_nvidia_smi(device)
    except (OSError, subprocess.SubprocessError, ValueError) as exc:
        return Snapshot(error=f"clocks not recorded: {exc}")


def notes(snaps: list[Snapshot]) -> ClockNotes:
    """What the snapshots taken around a run say about it."""
    good = [s for s in snaps if not s.error]
    if not good:
        return ClockNotes(source="", notes=[s.error for s in snaps[:1] if s.error])
    out = ClockNotes(source=good[0].source)
    sm = [s.sm_mhz for s in good if s.sm_mhz]
    mem = [s.mem_mhz for s in good if s.mem_mhz]
    out.sm_mhz = sm
    out.mem_mhz = mem
    out.sm_max_mhz = good[0].sm_max_mhz
    for label, values in (("SM", sm), ("memory", mem)):
        if len(values) >= 2 and max(values) > 0 and (max(values) - min(values)) / max(values) > CLOCK_MOVE:
            out.flagged = True
            out.notes.append(f"{label} clock moved during timing: {min(values)}–{max(values)} MHz")
    slow = sorted({name for s in good for name in s.slowdowns})
    if slow:
        out.flagged = True
        out.notes.append("the driver slowed the GPU during timing: " + ", ".join(slow))
    others = sorted({o for s in good for o in s.others})
    if others:
        out.flagged = True
        out.other_processes = others
        out.notes.append(f"{len(others)} other process(es) on the GPU during timing: " + ", ".join(others[:4]))
    return out
