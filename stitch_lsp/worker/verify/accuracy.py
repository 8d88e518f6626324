"""Accuracy beside speed: eager's and the candidate's error against a float64 run of the reference.

On one seed (the first trial's), the reference runs again with float64 weights on
float64 copies of the inputs (``torch``'s default dtype float64 meanwhile, for
tensors it makes inside forward). Its outputs stay; eager and the candidate then
run on the float32 inputs, one at a time, and each is compared with them slice by
slice. Only one side's inputs and outputs are alive beside the float64 outputs.
"""

from __future__ import annotations

import copy
from typing import Any, Callable

import torch

from stitch_lsp.verdict import LESS_ACCURATE_RATIO, Accuracy
from stitch_lsp.worker.verify.compare import ErrorStats, error_vs, tensors


def _to_float64(values: list[Any]) -> list[Any]:
    """float64 copies of the floating tensors, each float32 input dropped once it is converted."""
    out = []
    for i, v in enumerate(values):
        out.append(v.double() if isinstance(v, torch.Tensor) and v.is_floating_point() else v)
        values[i] = None
    return out


def float64_outputs(ref_model: Any, draw: Callable[[], list[Any]], sync: Callable[[], None]) -> tuple[Any, str]:
    """The reference's outputs from a float64 copy of it on float64 copies of ``draw()``'s inputs, or
    (None, why not). The copy and its inputs are gone when it returns; only the outputs stay."""
    ref64 = copy.deepcopy(ref_model)
    if isinstance(ref64, torch.nn.Module):
        ref64 = ref64.double()
    values64 = _to_float64(draw())  # drawn as always: the default dtype changes only for forward
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        out64 = ref64(*values64)
    except Exception as exc:  # noqa: BLE001 - a reference that only runs in float32 is no verdict's business
        return None, f"the reference does not run in float64: {type(exc).__name__}: {str(exc)[:200]}"
    finally:
        torch.set_default_dtype(previous)
        del ref64, values64
    sync()
    if not any(t.is_floating_point() for t in tensors(out64)):
        return None, "no floating-point output"
    return out64, ""


def measure(ref_model: Any, cand_model: Any, draw: Callable[[], list[Any]], seed: int, *,
            chunk: int, sync: Callable[[], None]) -> Accuracy:
    result = Accuracy(status="skipped", seed=seed)
    out64, why = float64_outputs(ref_model, draw, sync)
    if out64 is None:
        result.message = why
        return result
    outs64 = tensors(out64)
    if not all(t.is_floating_point() for t in outs64):
        result.message = "not every output is floating-point"
        return result
    result.reference_dtype = ", ".join(sorted({str(t.dtype).replace("torch.", "") for t in outs64}))

    def error_of(model: Any) -> tuple[ErrorStats | None, torch.dtype | None]:
        out = model(*draw())
        sync()
        first = next(iter(tensors(out)), None)
        return error_vs(out64, out, chunk), (first.dtype if first is not None else None)

    eager, dtype = error_of(ref_model)
    cand, _ = error_of(cand_model)
    del out64, outs64
    if eager is None or cand is None or dtype is None:
        result.message = "the outputs could not be compared with the float64 run"
        return result
    result.status = "measured"
    result.eager_max_abs_err, result.candidate_max_abs_err = eager.max_abs, cand.max_abs
    result.eager_mean_abs_err, result.candidate_mean_abs_err = eager.mean_abs, cand.mean_abs
    # Errors under one epsilon of the output dtype at the output's scale count as that much:
    # an exact eager result (relu, copies) does not make every rounding of the candidate infinitely worse.
    floor = torch.finfo(dtype).eps * max(eager.rms_ref, 1e-30)
    result.ratio = max(cand.max_abs, floor) / max(eager.max_abs, floor)
    result.less_accurate = result.ratio > LESS_ACCURATE_RATIO
    result.message = (f"max |error| against float64: eager {eager.max_abs:.3g}, candidate {cand.max_abs:.3g} "
                      f"({result.ratio:.2f}x eager's)")
    return result
