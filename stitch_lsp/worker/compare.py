"""Comparing a candidate's output with the reference's: dtype-aware, NaN/Inf positions exact."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch

# (rtol, atol) by dtype. atol is scaled by the reference's RMS (at least 1), so a
# large-magnitude output is judged relative to its own size; all-zeros never passes
# against a reference of unit scale.
TOLERANCES: dict[torch.dtype, tuple[float, float]] = {
    torch.float64: (1e-7, 1e-7),
    torch.float32: (1e-4, 1e-4),
    torch.float16: (1e-2, 1e-2),
    torch.bfloat16: (2e-2, 2e-2),
    torch.complex64: (1e-4, 1e-4),
    torch.complex128: (1e-7, 1e-7),
}


def tolerance(dtype: torch.dtype, rtol: float | None = None, atol: float | None = None) -> tuple[float, float]:
    base = TOLERANCES.get(dtype, (0.0, 0.0))
    return (base[0] if rtol is None else rtol, base[1] if atol is None else atol)


@dataclass
class Comparison:
    passed: bool
    max_abs: float | None = None
    max_rel: float | None = None
    mismatches: int = 0
    detail: str = ""


def flatten(value: Any) -> list[Any]:
    if isinstance(value, (tuple, list)):
        out: list[Any] = []
        for item in value:
            out.extend(flatten(item))
        return out
    if isinstance(value, dict):
        out = []
        for key in sorted(value, key=str):
            out.extend(flatten(value[key]))
        return out
    return [value]


def describe(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return f"tensor {tuple(value.shape)} {str(value.dtype).replace('torch.', '')} on {value.device}"
    return type(value).__name__


def output_scale(ref: torch.Tensor) -> float:
    if not ref.is_floating_point() and not ref.is_complex():
        return 1.0
    finite = ref[torch.isfinite(ref)] if ref.numel() else ref
    if finite.numel() == 0:
        return 1.0
    rms = float(finite.abs().double().pow(2).mean().sqrt())
    return max(1.0, rms)


def compare_tensor(ref: torch.Tensor, out: Any, rtol: float | None, atol: float | None, where: str = "") -> Comparison:
    label = f"{where}: " if where else ""
    if not isinstance(out, torch.Tensor):
        return Comparison(False, detail=f"{label}expected {describe(ref)}, got {describe(out)}")
    if tuple(out.shape) != tuple(ref.shape):
        return Comparison(False, detail=f"{label}wrong shape {tuple(out.shape)}, reference {tuple(ref.shape)}")
    if out.dtype != ref.dtype:
        return Comparison(False, detail=f"{label}wrong dtype {str(out.dtype).replace('torch.', '')}, "
                                        f"reference {str(ref.dtype).replace('torch.', '')}")
    if out.device.type != ref.device.type:
        return Comparison(False, detail=f"{label}output on {out.device}, reference on {ref.device}")
    if ref.numel() == 0:
        return Comparison(True, 0.0, 0.0)
    if not (ref.is_floating_point() or ref.is_complex()):
        diff = out != ref
        n = int(diff.sum())
        return Comparison(n == 0, 0.0 if n == 0 else None, None, n, f"{label}{n} elements differ" if n else "")
    r_tol, a_tol = tolerance(ref.dtype, rtol, atol)
    a_tol *= output_scale(ref)
    r = ref.double() if not ref.is_complex() else ref.to(torch.complex128)
    o = out.double() if not out.is_complex() else out.to(torch.complex128)
    r_nan, o_nan = torch.isnan(r), torch.isnan(o)
    nan_bad = int((r_nan != o_nan).sum())
    r_inf, o_inf = torch.isinf(r), torch.isinf(o)
    inf_bad = int(((r_inf | o_inf) & ~(r_nan | o_nan) & (r != o)).sum())
    finite = torch.isfinite(r) & torch.isfinite(o)
    diff = (o - r).abs()
    diff = torch.where(finite, diff, torch.zeros_like(diff))
    bound = a_tol + r_tol * r.abs()
    bad = int(((diff > bound) & finite).sum())
    max_abs = float(diff.max()) if finite.any() else 0.0
    rel = diff / r.abs().clamp_min(a_tol if a_tol > 0 else 1e-30)
    max_rel = float(torch.where(finite, rel, torch.zeros_like(rel)).max()) if finite.any() else 0.0
    total = nan_bad + inf_bad + bad
    parts = []
    if nan_bad:
        parts.append(f"NaN in {nan_bad} places where the reference differs")
    if inf_bad:
        parts.append(f"±Inf wrong in {inf_bad} places")
    if bad:
        idx = torch.nonzero((diff > bound) & finite)[0].tolist()
        parts.append(f"{bad} of {ref.numel()} values off by more than atol={a_tol:.2g}+rtol={r_tol:.2g}·|ref| "
                     f"(first at {tuple(idx)}: {float(o[tuple(idx)]):.6g} vs {float(r[tuple(idx)]):.6g})")
    return Comparison(total == 0, max_abs, max_rel if math.isfinite(max_rel) else None, total,
                      label + "; ".join(parts))


def compare(ref: Any, out: Any, rtol: float | None = None, atol: float | None = None) -> Comparison:
    refs, outs = flatten(ref), flatten(out)
    if len(refs) != len(outs):
        return Comparison(False, detail=f"returned {len(outs)} values, reference returns {len(refs)}")
    worst = Comparison(True, 0.0, 0.0)
    details = []
    for i, (r, o) in enumerate(zip(refs, outs)):
        where = f"output {i}" if len(refs) > 1 else ""
        if isinstance(r, torch.Tensor):
            c = compare_tensor(r, o, rtol, atol, where)
        else:
            same = type(r) is type(o) and r == o
            c = Comparison(bool(same), detail="" if same else f"{where or 'output'}: expected {r!r}, got {o!r}")
        if not c.passed:
            worst.passed = False
            details.append(c.detail)
        worst.mismatches += c.mismatches
        if c.max_abs is not None and worst.max_abs is not None:
            worst.max_abs = max(worst.max_abs, c.max_abs)
        elif c.max_abs is None:
            worst.max_abs = None if not c.passed else worst.max_abs
        if c.max_rel is not None and worst.max_rel is not None:
            worst.max_rel = max(worst.max_rel, c.max_rel)
    worst.detail = "; ".join(details)
    return worst


def same_values(a: Any, b: Any) -> bool:
    """Bitwise-equal up to NaN payloads: used for the input-mutation check."""
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        if a.shape != b.shape or a.dtype != b.dtype:
            return False
        if a.is_floating_point() or a.is_complex():
            return bool(((a == b) | (torch.isnan(a) & torch.isnan(b))).all())
        return bool(torch.equal(a, b))
    return True
