"""The pointwise ops a GEMM epilogue computes, as Triton expressions (the Triton side of ``op_table.POINTWISE``).

Expressions are over fp32 tiles ``{a}``, ``{b}``, ``{c}`` (the op's operands in order; a Python number
is a literal); booleans are 0.0 / 1.0, as in the CUDA kernels. Transcendentals go through libdevice or
Triton's own functions; comparisons and selections keep NaN where eager PyTorch puts it (``maximum``,
``clamp`` and ``relu`` propagate it).
"""

from __future__ import annotations

import math
from typing import Any, Callable

from stitch_lsp.plan.op_table import OPERAND_COUNT, Dialect, pointwise_table

NAN_PROPAGATE = "propagate_nan=tl.PropagateNan.ALL"


def literal(value: Any) -> str:
    """A float literal inside ``@triton.jit`` code; infinity is a module-level constexpr, NaN is made from it
    (Triton checks at each launch that the globals a kernel read are unchanged, and NaN never equals itself)."""
    v = float(value)
    if math.isnan(v):
        return "(_INF - _INF)"
    if math.isinf(v):
        return "_INF" if v > 0 else "(-_INF)"
    return repr(v)


TRITON = Dialect(
    column=1, literal=literal, zero="0.0", one="1.0",
    select=lambda c, x, y: f"tl.where({c}, {x}, {y})",
    at_least=lambda e, v: f"tl.maximum({e}, {v}, {NAN_PROPAGATE})",
    at_most=lambda e, v: f"tl.minimum({e}, {v}, {NAN_PROPAGATE})",
    fn={"exp": "tl.exp", "expm1": "_st_expm1", "log1p": "_st_log1p", "tanh": "_st_tanh", "erf": "tl.erf",
        "sqrt": "tl.sqrt_rn", "pow": "libdevice.pow", "floor": "tl.floor", "trunc": "_st_trunc"},
)
# op -> function(args, kwargs) -> Triton template over {a} {b} {c} (op_table.TEMPLATES' Triton column).
TRITON_POINTWISE: dict[str, Callable[[list, dict], str]] = pointwise_table(TRITON)

# Helpers the expressions call, written with Triton's own exp / log (no libdevice: Triton's interpreter
# runs them too, so the CPU tests cover the kernels that use them). Each is within a few fp32 ulps.
HELPERS = {
    "_st_expm1": """
@triton.jit
def _st_expm1(x):
    # A Taylor polynomial where exp(x) - 1 would cancel (|x| < 0.5: truncation below 2e-7 relative).
    p = x * (1.0 + x * (0.5 + x * (0.16666667 + x * (0.041666668 + x * (0.008333334
        + x * (0.0013888889 + x * 0.0001984127))))))
    return tl.where(tl.abs(x) < 0.5, p, tl.exp(x) - 1.0)
""",
    "_st_log1p": """
@triton.jit
def _st_log1p(x):
    # log(u) * x / (u - 1) with u = 1 + x rounded: the rounding of u cancels (Goldberg).
    u = 1.0 + x
    d = u - 1.0
    return tl.where(d == 0.0, x, tl.log(u) * (x / tl.where(d == 0.0, 1.0, d)))
""",
    "_st_tanh": """
@triton.jit
def _st_tanh(x):
    # expm1(2|x|) / (expm1(2|x|) + 2), sign restored; saturates to +-1 for large |x|, keeps NaN.
    e = _st_expm1(2.0 * tl.minimum(tl.abs(x), 20.0))
    t = e / (e + 2.0)
    return tl.where(x != x, x, tl.where(x < 0.0, -t, t))
""",
    "_st_trunc": """
@triton.jit
def _st_trunc(x):
    return tl.where(x < 0.0, tl.ceil(x), tl.floor(x))
""",
}
HELPER_NEEDS = {"_st_tanh": ["_st_expm1"]}


def helpers_for(source: str) -> str:
    """The helper functions ``source`` calls, each once, callees first."""
    wanted: list[str] = []

    def add(name: str) -> None:
        for dep in HELPER_NEEDS.get(name, []):
            add(dep)
        if name not in wanted:
            wanted.append(name)

    for name in HELPERS:
        if f"{name}(" in source:
            add(name)
    return "".join(HELPERS[n] for n in wanted)


TRITON_DTYPES = {"float32": "tl.float32", "bfloat16": "tl.bfloat16", "float16": "tl.float16", "bool": "tl.int1",
                 "int64": "tl.int64", "int32": "tl.int32"}


def expression(op: str, args: list, kwargs: dict, operands: list[str]) -> str:
    """The Triton expression of ``op`` over already-computed ``operands`` (names or literals)."""
    template = TRITON_POINTWISE[op](args, kwargs)
    return template.format(**dict(zip("abc", operands)))


def operand_count(op: str, args: list) -> int:
    return OPERAND_COUNT.get(op, len(args))


def rounded(expr: str, dtype: str) -> str:
    """``expr`` rounded to ``dtype`` as eager PyTorch rounds each half-precision op's result."""
    if dtype in ("bfloat16", "float16"):
        return f"({expr}).to({TRITON_DTYPES[dtype]}).to(tl.float32)"
    return expr
