"""Parsing Nsight Compute's ``--csv --page details --print-units base`` output into KernelProfiles.

Verified against real output captured on an H100 (tests/fixtures/h100/ncu_details.csv).
"""

from __future__ import annotations

import csv
import io
from collections import OrderedDict

from stitch_lsp.verdict import KernelProfile, NcuRule

# (section, metric) -> field; the section is matched by prefix, metrics exactly.
_PCT = {
    ("GPU Speed Of Light Throughput", "Duration"): "duration",
    ("GPU Speed Of Light Throughput", "Compute (SM) Throughput"): "sm_throughput_pct",
    ("GPU Speed Of Light Throughput", "Memory Throughput"): "memory_throughput_pct",
    ("GPU Speed Of Light Throughput", "DRAM Throughput"): "dram_throughput_pct",
    ("Occupancy", "Achieved Occupancy"): "achieved_occupancy_pct",
    ("Occupancy", "Theoretical Occupancy"): "theoretical_occupancy_pct",
    ("Launch Statistics", "Registers Per Thread"): "registers",
}
_LIMITS = {
    "Block Limit Registers": "registers",
    "Block Limit Shared Mem": "shared memory",
    "Block Limit Warps": "warps (block size)",
    "Block Limit SM": "blocks per SM",
    "Block Limit Barriers": "barriers",
}


def number(text: str) -> float | None:
    text = (text or "").strip().replace(",", "")
    if not text or text in ("n/a", "no data"):
        return None
    try:
        return float(text.split()[0])
    except ValueError:
        return None


def _scale(value: float | None, unit: str, target: str) -> float | None:
    """Convert a base-unit figure ('ns', 'byte/s', ...) to what a KernelProfile field holds."""
    if value is None:
        return None
    unit = unit.strip()
    if target == "us":
        return value / 1e3 if unit in ("ns", "nsecond") else value * 1e6 if unit in ("s", "second") else value
    return value


def _csv_rows(text: str) -> list[dict[str, str]]:
    # ncu prints its own ==PROF== lines and the program's stdout before the table.
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID"')), None)
    if start is None:
        return []
    body = "\n".join(line for line in lines[start:] if line.startswith('"'))
    return list(csv.DictReader(io.StringIO(body)))


def parse_details_csv(text: str, role: str = "candidate") -> list[KernelProfile]:
    kernels: "OrderedDict[str, KernelProfile]" = OrderedDict()
    extra: dict[str, dict[str, float]] = {}
    for row in _csv_rows(text):
        kid = row.get("ID", "")
        if kid not in kernels:
            kernels[kid] = KernelProfile(name=row.get("Kernel Name", ""), role=role,
                                         grid=row.get("Grid Size", ""), block=row.get("Block Size", ""))
            extra[kid] = {}
        k, x = kernels[kid], extra[kid]
        section = row.get("Section Name", "")
        label = row.get("Body Item Label", "")
        metric = row.get("Metric Name", "")
        unit = row.get("Metric Unit", "")
        value = number(row.get("Metric Value", ""))
        rule = row.get("Rule Name", "")
        if rule:
            speedup = number(row.get("Estimated Speedup", ""))
            k.rules.append(NcuRule(name=rule, message=(row.get("Rule Description") or "").strip(),
                                   rule_type=row.get("Rule Type", ""), estimated_speedup_pct=speedup))
            continue
        if label:
            key = f"{section}|{label}|{metric}"
            if value is not None:
                x[key] = value
            continue
        field = _PCT.get((section, metric))
        if field == "duration":
            k.duration_us = _scale(value, unit, "us")
        elif field == "registers":
            k.registers = int(value) if value is not None else None
        elif field:
            setattr(k, field, value)
        elif section == "Memory Workload Analysis" and metric == "Memory Throughput" and value is not None:
            k.dram_bandwidth_gbs = value / 1e9 if "byte/s" in unit else value
        elif section == "Launch Statistics" and metric in ("Static Shared Memory Per Block",
                                                          "Dynamic Shared Memory Per Block") and value is not None:
            k.shared_bytes = int((k.shared_bytes or 0) + value)
        elif section == "Memory Workload Analysis" and metric == "Local Memory Spilling Requests" and value is not None:
            x["spill_requests"] = value
        elif metric in _LIMITS and value is not None:
            x[f"limit|{metric}"] = value
    for kid, k in kernels.items():
        _derive(k, extra[kid])
    return list(kernels.values())


def _derive(k: KernelProfile, x: dict[str, float]) -> None:
    if k.duration_us and k.dram_bandwidth_gbs is not None:
        k.dram_bytes = k.dram_bandwidth_gbs * 1e9 * k.duration_us * 1e-6
    # Roofline: achieved FP32 (and FP64) operations per cycle x SM clock x duration.
    sp = "GPU Speed Of Light Roofline Chart|Single Precision Achieved Value|"
    dp = "GPU Speed Of Light Roofline Chart|Double Precision Achieved Value|"
    sm_hz = x.get(sp + "SM Frequency")
    if sm_hz and k.duration_us:
        per_cycle = (x.get(sp + "Predicated-On FFMA Operations Per Cycle", 0.0)
                     + x.get(sp + "Predicated-On FADD Thread Instructions Executed Per Cycle", 0.0)
                     + x.get(sp + "Predicated-On FMUL Thread Instructions Executed Per Cycle", 0.0)
                     + x.get(dp + "Predicated-On DFMA Operations Per Cycle", 0.0)
                     + x.get(dp + "Predicated-On DADD Thread Instructions Executed Per Cycle", 0.0)
                     + x.get(dp + "Predicated-On DMUL Thread Instructions Executed Per Cycle", 0.0))
        k.flops = per_cycle * sm_hz * k.duration_us * 1e-6
        if k.dram_bytes:
            k.arithmetic_intensity = k.flops / k.dram_bytes
    peak = "GPU Speed Of Light Roofline Chart|Single Precision Roofline|"
    peak_ops = x.get(peak + "Theoretical Predicated-On FFMA Operations")
    bytes_cycle = x.get(peak + "Theoretical DRAM Bytes Accessible")
    dram_hz = x.get(peak + "DRAM Frequency")
    peak_sm_hz = x.get(peak + "SM Frequency")
    if peak_ops and bytes_cycle and dram_hz and peak_sm_hz:
        k.ridge_point = (peak_ops * peak_sm_hz) / (bytes_cycle * dram_hz)
    limits = {m: v for m, v in ((key.split("|", 1)[1], v) for key, v in x.items() if key.startswith("limit|"))}
    if limits and k.theoretical_occupancy_pct is not None and k.theoretical_occupancy_pct < 100:
        k.occupancy_limiter = _LIMITS[min(limits, key=lambda m: limits[m])]
    if "spill_requests" in x and x["spill_requests"] > 0:
        k.spill_bytes = None  # requests, not bytes: the rules carry the message
    sm, mem = k.sm_throughput_pct or 0.0, k.memory_throughput_pct or 0.0
    if max(sm, mem) < 60.0:
        k.bound = "latency"
    else:
        k.bound = "memory" if mem >= sm else "compute"
