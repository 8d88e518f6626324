"""Comparing a candidate's output with the reference's: dtype-aware, NaN/Inf positions exact.

Everything here works over slices of at most ``chunk`` elements, so comparing two
6 GiB float32 outputs needs a few hundred MiB of float64 scratch, never a full-size
float64 (or extra float32) copy. The same slicing gives fingerprints (a few numbers
that change when any value changes: used to see whether an output was ready when
forward returned, and whether inputs were modified) and the error against a float64
run of the reference.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterator

import torch

from stitch_lsp.contract.memory_plan import CHUNK_ELEMENTS

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
    max_abs: float | None = None  # against the reference (against float64 where one was given)
    max_rel: float | None = None
    mismatches: int = 0
    detail: str = ""
    misplaced: int = 0  # NaN / ±Inf where the reference has none, or missing where it has them
    # Judged against a float64 run (``ref64``): eager's own largest error against it.
    eager_max_abs: float | None = None
    # Passed against float64 as a whole though some values were over their own bound: why (see compare_tensor).
    as_a_whole: str = ""
    # Positions not judged because the reference is not finite there (``undefined_where_not_finite``).
    left_out: int = 0
    numel: int = 0  # floating-point values compared in all (left out included)


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


def tensors(value: Any) -> list[torch.Tensor]:
    return [v for v in flatten(value) if isinstance(v, torch.Tensor)]


def describe(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return f"tensor {tuple(value.shape)} {str(value.dtype).replace('torch.', '')} on {value.device}"
    return type(value).__name__


def _is_float(t: torch.Tensor) -> bool:
    return t.is_floating_point() or t.is_complex()


def _flat(t: torch.Tensor) -> torch.Tensor:
    """A 1-D view (a copy only for non-contiguous tensors, which outputs rarely are)."""
    return t.view(-1) if t.is_contiguous() else t.reshape(-1)


def _slices(n: int, chunk: int) -> Iterator[tuple[int, int]]:
    for start in range(0, n, max(1, chunk)):
        yield start, min(n, start + chunk)


def _wide(x: torch.Tensor) -> torch.Tensor:
    return x.to(torch.complex128) if x.is_complex() else x.double()


def output_scale(ref: torch.Tensor, chunk: int = CHUNK_ELEMENTS) -> float:
    """max(1, RMS of the reference's finite values), summed in float64 slice by slice."""
    if not _is_float(ref) or ref.numel() == 0:
        return 1.0
    flat = _flat(ref)
    total = torch.zeros((), dtype=torch.float64, device=ref.device)
    count = torch.zeros((), dtype=torch.int64, device=ref.device)
    for a, b in _slices(flat.numel(), chunk):
        r = _wide(flat[a:b])
        finite = torch.isfinite(r)
        total += torch.where(finite, r.abs(), 0.0).pow(2).sum()
        count += finite.sum()
    n = int(count)
    return max(1.0, math.sqrt(float(total) / n)) if n else 1.0


def compare_tensor(ref: torch.Tensor, out: Any, rtol: float | None, atol: float | None, where: str = "",
                   chunk: int = CHUNK_ELEMENTS, ref64: torch.Tensor | None = None,
                   eager_multiple: float = 0.0, undefined_where_not_finite: bool = False) -> Comparison:
    """``out`` against ``ref`` at the dtype's tolerance; NaN / ±Inf must sit where ``ref`` has them.

    ``undefined_where_not_finite``: for adversarial inputs that are all finite, a NaN or ±Inf in the
    reference's output means the reference overflowed its dtype there (fp16 ``q @ kᵀ`` of large values is
    inf, NaN after the softmax): the function is not defined by it at that position, which is left out
    (counted in ``left_out``) whatever the candidate has there. Everywhere the reference is finite the
    candidate is judged as always: within the tolerance, and NaN or ±Inf there is wrong.

    With ``ref64`` (a float64 run of the reference on the same inputs), finite values are judged
    against it instead, wherever it is finite: each may be off by the tolerance plus
    ``eager_multiple`` times eager's (``ref``'s) own error there, so a candidate about as accurate as
    eager passes where eager's last bits are visible (an epilogue that cancels), and one less
    accurate still fails wherever eager is accurate. Where some values are over that bound, the
    candidate still passes as a whole when its largest error is within the tolerance plus
    ``eager_multiple`` times eager's largest, and its mean error within ``eager_multiple`` times
    eager's mean: value by value, a kernel that sums in another order is sometimes off where eager
    happens to be exact, however much more accurate it is overall (a 3xTF32 GEMM, a convolution in
    another layout). NaN and ±Inf must still sit where eager has them.
    """
    label = f"{where}: " if where else ""
    wrong = _wrong_kind(ref, out, label)
    if wrong is not None:
        return wrong
    if ref.numel() == 0:
        return Comparison(True, 0.0, 0.0)
    r_flat, o_flat = _flat(ref), _flat(out)
    undefined_where_not_finite = undefined_where_not_finite and _is_float(ref)
    if not _is_float(ref):
        n = sum(int((o_flat[a:b] != r_flat[a:b]).sum()) for a, b in _slices(r_flat.numel(), chunk))
        return Comparison(n == 0, 0.0 if n == 0 else None, None, n, f"{label}{n} elements differ" if n else "")
    r_tol, a_tol = tolerance(ref.dtype, rtol, atol)
    a_tol *= output_scale(ref, chunk)
    x_flat = None
    if ref64 is not None and ref.is_floating_point() and tuple(ref64.shape) == tuple(ref.shape):
        x_flat = _flat(ref64)
    judge = _Judge(r_flat, o_flat, x_flat, r_tol, a_tol, eager_multiple)
    tally = _Tally.on(ref.device)
    for a, b in _slices(r_flat.numel(), chunk):
        tally.add(judge.slice(a, b), a_tol, undefined_where_not_finite)
    misplaced = int(tally.nan_bad) + int(tally.inf_bad)
    total = misplaced + int(tally.bad)
    whole = ""
    if x_flat is not None and int(tally.bad) and not misplaced and eager_multiple > 0:
        whole = _as_a_whole(tally, ref.numel(), a_tol, eager_multiple)
        if whole:
            total = 0
    parts = _problems(tally, judge, ref, chunk, undefined_where_not_finite)
    rel_value = float(tally.max_rel)
    if whole:
        parts = [whole]
    return Comparison(total == 0, float(tally.max_abs), rel_value if math.isfinite(rel_value) else None, total,
                      label + "; ".join(parts), misplaced=misplaced,
                      eager_max_abs=float(tally.eager_max) if x_flat is not None else None, as_a_whole=label + whole,
                      left_out=int(tally.left), numel=ref.numel())


def _wrong_kind(ref: torch.Tensor, out: Any, label: str) -> Comparison | None:
    """A failed comparison when ``out`` is no tensor of the reference's shape, dtype and device type."""
    if not isinstance(out, torch.Tensor):
        return Comparison(False, detail=f"{label}expected {describe(ref)}, got {describe(out)}")
    if tuple(out.shape) != tuple(ref.shape):
        return Comparison(False, detail=f"{label}wrong shape {tuple(out.shape)}, reference {tuple(ref.shape)}")
    if out.dtype != ref.dtype:
        return Comparison(False, detail=f"{label}wrong dtype {str(out.dtype).replace('torch.', '')}, "
                                        f"reference {str(ref.dtype).replace('torch.', '')}")
    if out.device.type != ref.device.type:
        return Comparison(False, detail=f"{label}output on {out.device}, reference on {ref.device}")
    return None


@dataclass
class _Judge:
    """The flattened outputs and the bound each value is held to."""

    r_flat: torch.Tensor
    o_flat: torch.Tensor
    x_flat: torch.Tensor | None  # the float64 run of the reference, where one was given
    r_tol: float
    a_tol: float  # already scaled by the reference's RMS
    eager_multiple: float

    def slice(self, a: int, b: int) -> tuple[torch.Tensor, ...]:
        """The slice's values, what each is judged against, |error|, and which are over their bound."""
        r, o = _wide(self.r_flat[a:b]), _wide(self.o_flat[a:b])
        finite = torch.isfinite(r) & torch.isfinite(o)
        target, allowance, eager_err = r, 0.0, None
        if self.x_flat is not None:
            x = self.x_flat[a:b].double()
            exact = torch.isfinite(x)  # elsewhere (float64 overflowed, say) eager's value stands
            target = torch.where(exact, x, r)
            eager_err = torch.where(exact & finite, (r - x).abs(), 0.0)
            allowance = self.eager_multiple * eager_err
        diff = torch.where(finite, (o - target).abs(), 0.0)
        over = (diff > self.a_tol + self.r_tol * target.abs() + allowance) & finite
        return r, o, target, diff, over, finite, eager_err


@dataclass
class _Tally:
    """Counts and extremes over the slices so far, kept on the device (read once the slices are done)."""

    nan_bad: torch.Tensor
    inf_bad: torch.Tensor
    bad: torch.Tensor  # finite values over their bound
    max_abs: torch.Tensor
    max_rel: torch.Tensor
    eager_max: torch.Tensor
    cand_sum: torch.Tensor
    eager_sum: torch.Tensor
    left: torch.Tensor  # positions left out: the reference is not finite there (undefined_where_not_finite)
    per_slice: list[torch.Tensor]  # values over the bound in each slice, to find the first one afterwards

    @classmethod
    def on(cls, dev: torch.device) -> _Tally:
        def count() -> torch.Tensor:
            return torch.zeros((), dtype=torch.int64, device=dev)

        def real() -> torch.Tensor:
            return torch.zeros((), dtype=torch.float64, device=dev)

        return cls(count(), count(), count(), real(), real(), real(), real(), real(), count(), [])

    def add(self, judged: tuple[torch.Tensor, ...], a_tol: float, undefined_where_not_finite: bool) -> None:
        r, o, target, diff, over, finite, eager_err = judged
        r_nan, o_nan = torch.isnan(r), torch.isnan(o)
        r_inf, o_inf = torch.isinf(r), torch.isinf(o)
        nan_wrong = r_nan != o_nan
        inf_wrong = (r_inf | o_inf) & ~(r_nan | o_nan) & (r != o)
        if undefined_where_not_finite:
            defined = torch.isfinite(r)
            self.left += (~defined).sum()
            nan_wrong &= defined
            inf_wrong &= defined
        self.nan_bad += nan_wrong.sum()
        self.inf_bad += inf_wrong.sum()
        n_over = over.sum()
        self.bad += n_over
        self.per_slice.append(n_over)
        self.max_abs = torch.maximum(self.max_abs, diff.max())
        rel = torch.where(finite, diff / target.abs().clamp_min(a_tol if a_tol > 0 else 1e-30), 0.0)
        self.max_rel = torch.maximum(self.max_rel, rel.max())
        if eager_err is not None:
            self.eager_max = torch.maximum(self.eager_max, eager_err.max())
            self.cand_sum += diff.sum()
            self.eager_sum += eager_err.sum()


def _as_a_whole(tally: _Tally, numel: int, a_tol: float, eager_multiple: float) -> str:
    """Why a candidate with values over their bound against float64 still passes (see ``compare_tensor``),
    or "" when it does not."""
    n = max(1, numel)
    c_max, e_max = float(tally.max_abs), float(tally.eager_max)
    c_mean, e_mean = float(tally.cand_sum) / n, float(tally.eager_sum) / n
    if c_max <= a_tol + eager_multiple * e_max and c_mean <= eager_multiple * e_mean:
        return (f"{int(tally.bad)} of {numel} values off the float64 result by more than the tolerance + "
                f"{eager_multiple:g}x eager's error at that value, but as a whole as accurate as eager: largest "
                f"|error| {c_max:.3g} (eager {e_max:.3g}), mean {c_mean:.3g} (eager {e_mean:.3g})")
    return ""


def _problems(tally: _Tally, judge: _Judge, ref: torch.Tensor, chunk: int, undefined_where_not_finite: bool
              ) -> list[str]:
    """What is wrong, in words: misplaced NaN and ±Inf, then the values over their bound with the first of them."""
    parts = []
    if int(tally.nan_bad):
        where_ = " (the reference is finite there)" if undefined_where_not_finite else ""
        parts.append(f"NaN in {int(tally.nan_bad)} places where the reference differs{where_}")
    if int(tally.inf_bad):
        parts.append(f"±Inf wrong in {int(tally.inf_bad)} places")
    if int(tally.bad):
        parts.append(_first_over(tally, judge, ref, chunk))
    return parts


def _first_over(tally: _Tally, judge: _Judge, ref: torch.Tensor, chunk: int) -> str:
    """How many values are over their bound, and the first of them (its slice judged again to find it)."""
    r_flat, o_flat = judge.r_flat, judge.o_flat
    first = int(torch.nonzero(torch.stack(tally.per_slice))[0])
    a = first * chunk
    _, _, target, _, over, _, eager_err = judge.slice(a, min(r_flat.numel(), a + chunk))
    i = int(torch.nonzero(over)[0])
    k = a + i
    idx = tuple(int(j) for j in _unravel(k, tuple(ref.shape)))
    bound = f"atol={judge.a_tol:.2g}+rtol={judge.r_tol:.2g}·|ref|"
    if eager_err is None:
        return (f"{int(tally.bad)} of {ref.numel()} values off by more than {bound} "
                f"(first at {idx}: {_scalar(o_flat[k]):.6g} vs {_scalar(r_flat[k]):.6g})")
    return (f"{int(tally.bad)} of {ref.numel()} values off the float64 result by more than {bound}"
            f"+{judge.eager_multiple:g}x eager's error there (first at {idx}: {_scalar(o_flat[k]):.6g} vs "
            f"{float(target[i]):.9g}, eager {_scalar(r_flat[k]):.6g})")


def _scalar(x: torch.Tensor) -> float:
    x = _wide(x)
    return float(x.real if x.is_complex() else x)


def _unravel(k: int, shape: tuple[int, ...]) -> list[int]:
    idx = []
    for size in reversed(shape):
        idx.append(k % size if size else 0)
        k //= size if size else 1
    return list(reversed(idx))


def compare(ref: Any, out: Any, rtol: float | None = None, atol: float | None = None,
            chunk: int = CHUNK_ELEMENTS, ref64: Any = None, eager_multiple: float = 0.0,
            undefined_where_not_finite: bool = False) -> Comparison:
    """Every output against the reference's (``ref64``: against a float64 run too; ``undefined_where_not_finite``:
    positions where the reference is not finite left out; see ``compare_tensor``)."""
    refs, outs = flatten(ref), flatten(out)
    if len(refs) != len(outs):
        return Comparison(False, detail=f"returned {len(outs)} values, reference returns {len(refs)}")
    exact = flatten(ref64) if ref64 is not None else []
    if len(exact) != len(refs):
        exact = [None] * len(refs)
    worst = Comparison(True, 0.0, 0.0)
    details = []
    for i, (r, o, x) in enumerate(zip(refs, outs, exact)):
        where = f"output {i}" if len(refs) > 1 else ""
        if isinstance(r, torch.Tensor):
            c = compare_tensor(r, o, rtol, atol, where, chunk, x if isinstance(x, torch.Tensor) else None,
                               eager_multiple, undefined_where_not_finite)
        else:
            same = type(r) is type(o) and r == o
            c = Comparison(bool(same), detail="" if same else f"{where or 'output'}: expected {r!r}, got {o!r}")
        if not c.passed:
            worst.passed = False
            details.append(c.detail)
        worst.mismatches += c.mismatches
        worst.misplaced += c.misplaced
        worst.left_out += c.left_out
        worst.numel += c.numel if isinstance(r, torch.Tensor) and _is_float(r) else 0
        if c.max_abs is not None and worst.max_abs is not None:
            worst.max_abs = max(worst.max_abs, c.max_abs)
        elif c.max_abs is None:
            worst.max_abs = None if not c.passed else worst.max_abs
        if c.max_rel is not None and worst.max_rel is not None:
            worst.max_rel = max(worst.max_rel, c.max_rel)
        if c.eager_max_abs is not None:
            worst.eager_max_abs = max(worst.eager_max_abs or 0.0, c.eager_max_abs)
        if c.as_a_whole:
            worst.as_a_whole = "; ".join(filter(None, [worst.as_a_whole, c.as_a_whole]))
    worst.detail = "; ".join(details)
    return worst


def values_only(ref: Any, out: Any) -> bool:
    """Whether ``out`` has the reference's structure (count, shapes, dtypes, devices) and some floating
    output: a comparison of it can fail on values alone."""
    refs, outs = flatten(ref), flatten(out)
    if len(refs) != len(outs):
        return False
    floating = False
    for r, o in zip(refs, outs):
        if isinstance(r, torch.Tensor):
            if not (isinstance(o, torch.Tensor) and o.shape == r.shape and o.dtype == r.dtype
                    and o.device.type == r.device.type):
                return False
            floating = floating or r.is_floating_point()
    return floating


# ------------------------------------------------------------------ fingerprints

_WEIGHT_PERIOD = 7919  # a prime: position weights that a permutation of values changes


def _weights(n: int, device: torch.device) -> torch.Tensor:
    return (torch.arange(n, device=device, dtype=torch.int64) % _WEIGHT_PERIOD + 1).double()


def fingerprint(value: Any, chunk: int = CHUNK_ELEMENTS) -> tuple:
    """A few numbers per tensor that change when any of its values (or their order) changes.

    Computed by kernels on the current stream: taken right after ``forward`` returns, it
    reads the output as the caller's stream sees it then. Equal fingerprints mean equal
    tensors for every purpose here (sums in float64 plus a position-weighted sum, with
    NaN and ±Inf counted apart).
    """
    parts: list[Any] = []
    for v in flatten(value):
        if not isinstance(v, torch.Tensor):
            parts.append(("value", repr(v)[:200]))
            continue
        parts.append((tuple(v.shape), str(v.dtype)))
        if v.numel() == 0:
            continue
        flat = _flat(v)
        if flat.is_complex():
            flat = torch.view_as_real(flat).reshape(-1)
        sums = []
        weights = _weights(min(chunk, flat.numel()), flat.device)
        for a, b in _slices(flat.numel(), chunk):
            x = flat[a:b]
            w = weights[: b - a]
            if x.is_floating_point():
                x = x.double()
                nan = torch.isnan(x)
                finite = torch.isfinite(x)
                z = torch.where(finite, x, 0.0)
                sums.append(torch.stack([nan.sum().double(), (x == math.inf).sum().double(),
                                         (x == -math.inf).sum().double(), z.sum(), (z * w).sum()]))
            else:
                x = x.to(torch.int64).double()
                sums.append(torch.stack([x.sum(), (x * w).sum()]))
        parts.append(tuple(torch.stack(sums).sum(0).tolist()))
    return tuple(parts)


def same_fingerprint(a: tuple, b: tuple) -> bool:
    """Equal, with NaN equal to NaN (a sum over a NaN-free slice never is NaN, but be safe)."""
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        if isinstance(x, tuple) and isinstance(y, tuple):
            if not same_fingerprint(x, y):
                return False
        elif isinstance(x, float) and isinstance(y, float):
            if not (x == y or (math.isnan(x) and math.isnan(y))):
                return False
        elif x != y:
            return False
    return True


# ------------------------------------------------------------------ error against float64


@dataclass
class ErrorStats:
    max_abs: float = 0.0
    mean_abs: float = 0.0
    count: int = 0  # finite positions compared
    rms_ref: float = 0.0  # RMS of the float64 reference's finite values


def error_vs(ref64: Any, out: Any, chunk: int = CHUNK_ELEMENTS) -> ErrorStats | None:
    """Max and mean |out - ref64| over positions finite in both, slice by slice; None if not comparable."""
    refs, outs = tensors(ref64), tensors(out)
    if len(refs) != len(outs) or not refs:
        return None
    stats = ErrorStats()
    total = sq = 0.0
    for r_t, o_t in zip(refs, outs):
        if not (r_t.is_floating_point() and o_t.is_floating_point()) or r_t.shape != o_t.shape:
            return None
        r_flat, o_flat = _flat(r_t), _flat(o_t)
        err_sum = torch.zeros((), dtype=torch.float64, device=r_t.device)
        sq_sum = torch.zeros((), dtype=torch.float64, device=r_t.device)
        worst = torch.zeros((), dtype=torch.float64, device=r_t.device)
        count = torch.zeros((), dtype=torch.int64, device=r_t.device)
        for a, b in _slices(r_flat.numel(), chunk):
            r, o = r_flat[a:b].double(), o_flat[a:b].double()
            finite = torch.isfinite(r) & torch.isfinite(o)
            diff = torch.where(finite, (o - r).abs(), 0.0)
            worst = torch.maximum(worst, diff.max())
            err_sum += diff.sum()
            sq_sum += torch.where(finite, r, 0.0).pow(2).sum()
            count += finite.sum()
        n = int(count)
        stats.max_abs = max(stats.max_abs, float(worst))
        total += float(err_sum)
        sq += float(sq_sum)
        stats.count += n
    stats.mean_abs = total / stats.count if stats.count else 0.0
    stats.rms_ref = math.sqrt(sq / stats.count) if stats.count else 0.0
    return stats


def count_finite(value: Any, chunk: int = CHUNK_ELEMENTS) -> tuple[int, int]:
    """(finite values, all values) over the floating-point tensors in ``value``, slice by slice (no
    full-size mask)."""
    finite = total = 0
    for t in tensors(value):
        if not t.is_floating_point() or t.numel() == 0:
            continue
        flat = _flat(t)
        count = torch.zeros((), dtype=torch.int64, device=t.device)
        for a, b in _slices(flat.numel(), chunk):
            count += torch.isfinite(flat[a:b]).sum()
        finite += int(count)
        total += flat.numel()
    return finite, total


def peak_abs(value: Any, chunk: int = CHUNK_ELEMENTS) -> float:
    """The largest |x| over the finite values of the floating-point tensors in ``value``."""
    peak = 0.0
    for t in tensors(value):
        if not t.is_floating_point() or t.numel() == 0:
            continue
        flat = _flat(t)
        best = torch.zeros((), dtype=torch.float64, device=t.device)
        for a, b in _slices(flat.numel(), chunk):
            x = flat[a:b]
            best = torch.maximum(best, torch.where(torch.isfinite(x), x.abs(), 0).max().double())
        peak = max(peak, float(best))
    return peak
