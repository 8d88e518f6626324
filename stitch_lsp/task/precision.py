"""The precision a task runs in (``--precision fp32|bf16|fp16``), as KernelBench's harness does it.

The harness casts the model (its floating parameters and buffers) and the floating inputs to the
precision's dtype and compares the outputs at that dtype's tolerance. Here a task at a precision
is its reference source with that cast appended: ``Model.__init__`` ends with ``self.to(dtype)``
and ``get_inputs()`` casts what it returns. Every stage then sees the same task (tracing, the
Planner, the Coder, the Verifier's trials, second shape, float64 accuracy run, ``torch.compile``
baseline), and a generated ``ModelNew``, which subclasses the reference's ``Model``, is cast with it.
Integer inputs (class indices) stay as they are. Pure text; no torch here.

A selection whose shapes come from a recording of the user's own program keeps the recorded dtypes:
those are what the program runs (``for_task``).
"""

from __future__ import annotations

import re
from pathlib import Path

PRECISIONS = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}
DEFAULT = "fp32"
_MARK = "# --- stitch: precision "
_CAST = (Path(__file__).parent / "templates" / "precision_cast.py.tmpl").read_text(encoding="utf-8")


class PrecisionError(ValueError):
    """An unknown precision name (the message lists the known ones)."""


def dtype_of(precision: str) -> str:
    """``bf16`` -> ``bfloat16``."""
    try:
        return PRECISIONS[precision]
    except KeyError:
        raise PrecisionError(f"precision {precision!r}: want one of {', '.join(PRECISIONS)}") from None


def cast_source(source: str, precision: str) -> str:
    """The task ``source`` run in ``precision``: unchanged for fp32 (KernelBench's tasks are written in it)."""
    dtype = dtype_of(precision)
    if precision == DEFAULT or _MARK in source:
        return source
    # Python appended to the task's source (stitch_lsp/task/templates/): it runs in the worker, with the task.
    return source.rstrip("\n") + "\n\n\n" + _CAST.format(mark=_MARK, precision=precision, dtype=dtype)


def precision_of(source: str) -> str:
    """The precision ``cast_source`` gave ``source`` (fp32 when none)."""
    at = source.find(_MARK)
    if at < 0:
        return DEFAULT
    return source[at + len(_MARK):].split(" ", 1)[0]


def for_task(requested: str, shape_source: str, recorded_dtypes: list[str] | None = None) -> tuple[str, str]:
    """(the precision to run a selection in, a note for the user): a recording's dtypes win over
    ``--precision``, since they are what the user's program runs (every input's source a recording:
    ``recorded (FILE, line N)`` from ``stitch record``, or ``recorder``).

    The hook for recordings: a recorded selection is fused at the dtypes it was recorded with, and
    the note says that the option was not applied."""
    dtype_of(requested)
    others = re.sub(r"recorded \([^)]*\)|recorder", "", shape_source).strip(", ")
    recorded = bool(shape_source) and not others
    if recorded and requested != DEFAULT:
        seen = ", ".join(sorted(set(recorded_dtypes or []))) or "the recorded dtypes"
        return DEFAULT, f"--precision {requested} not applied: the recording of your program says {seen}"
    return requested, ""
