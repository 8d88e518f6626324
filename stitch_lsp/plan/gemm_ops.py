"""The pointwise ops a GEMM epilogue computes, as Triton expressions (the Triton side of ``op_table.POINTWISE``).

Expressions are over fp32 tiles ``{a}``, ``{b}``, ``{c}`` (the op's operands in order; a Python number
is a literal); booleans are 0.0 / 1.0, as in the CUDA kernels. Transcendentals go through libdevice or
Triton's own functions; comparisons and selections keep NaN where eager PyTorch puts it (``maximum``,
``clamp`` and ``relu`` propagate it).
"""

from __future__ import annotations

import math
from typing import Any, Callable

from stitch_lsp.plan.op_table import (
    OPERAND_COUNT, add_alpha, clamp_bounds, elu_params, gelu_is_tanh, hardtanh_bounds, leaky_slope,
    pow_scalar_template, softplus_params,
)

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


def _alpha(args, kw, sign: str) -> str:
    alpha = add_alpha(args, kw)
    return "({a} %s {b})" % sign if alpha in (1, 1.0) else "({a} %s %s * {b})" % (sign, literal(alpha))


def _max(x: str, y: str) -> str:
    return f"tl.maximum({x}, {y}, {NAN_PROPAGATE})"


def _min(x: str, y: str) -> str:
    return f"tl.minimum({x}, {y}, {NAN_PROPAGATE})"


def _clamp(lo, hi) -> str:
    expr = "{a}"
    if lo is not None:
        expr = _max(expr, literal(lo))
    if hi is not None:
        expr = _min(expr, literal(hi))
    return expr


def _gelu(args, kw) -> str:
    if gelu_is_tanh(args, kw):
        return "(0.5 * {a} * (1.0 + _st_tanh(0.7978845608028654 * ({a} + 0.044715 * {a} * {a} * {a}))))"
    return "(0.5 * {a} * (1.0 + tl.erf({a} * 0.7071067811865476)))"


def _pow_scalar(args, kw) -> str:
    return pow_scalar_template(args, sqrt="tl.sqrt_rn", power="libdevice.pow", one="1.0", literal=literal)


def _elu(args, kw) -> str:
    alpha, scale, input_scale = elu_params(args)
    return ("tl.where({a} > 0.0, %s * {a}, %s * _st_expm1(%s * {a}))"
            % (literal(scale), literal(alpha * scale), literal(input_scale)))


def _leaky(args, kw) -> str:
    slope = leaky_slope(args)
    return "tl.where({a} > 0.0, {a}, %s * {a})" % literal(slope)


def _softplus(args, kw) -> str:
    beta, threshold = (literal(v) for v in softplus_params(args))
    return f"tl.where({{a}} * {beta} > {threshold}, {{a}}, _st_log1p(tl.exp({{a}} * {beta})) / {beta})"


def _div_mode(args, kw) -> str:
    mode = kw.get("rounding_mode")
    if mode == "trunc":
        return "_st_trunc({a} / {b})"
    if mode == "floor":
        return "tl.floor({a} / {b})"
    return "({a} / {b})"


def _fixed(expr: str) -> Callable[[list, dict], str]:
    return lambda args, kw: expr


def _flag(expr: str) -> Callable[[list, dict], str]:
    return _fixed(f"({expr}).to(tl.float32)")


# op -> function(args, kwargs) -> Triton template over {a} {b} {c}.
TRITON_POINTWISE: dict[str, Callable[[list, dict], str]] = {
    "aten.add.Tensor": lambda a, k: _alpha(a, k, "+"),
    "aten.add.Scalar": lambda a, k: _alpha(a, k, "+"),
    "aten.sub.Tensor": lambda a, k: _alpha(a, k, "-"),
    "aten.sub.Scalar": lambda a, k: _alpha(a, k, "-"),
    "aten.rsub.Scalar": _fixed("({b} - {a})"),
    "aten.rsub.Tensor": _fixed("({b} - {a})"),
    "aten.mul.Tensor": _fixed("({a} * {b})"),
    "aten.mul.Scalar": _fixed("({a} * {b})"),
    "aten.div.Tensor": _fixed("({a} / {b})"),
    "aten.div.Scalar": _fixed("({a} / {b})"),
    "aten.div.Tensor_mode": _div_mode,
    "aten.neg.default": _fixed("(-{a})"),
    "aten.abs.default": _fixed("tl.abs({a})"),
    "aten.exp.default": _fixed("tl.exp({a})"),
    "aten.exp2.default": _fixed("tl.exp2({a})"),
    "aten.expm1.default": _fixed("_st_expm1({a})"),
    "aten.log.default": _fixed("tl.log({a})"),
    "aten.log2.default": _fixed("tl.log2({a})"),
    "aten.log1p.default": _fixed("_st_log1p({a})"),
    "aten.sqrt.default": _fixed("tl.sqrt_rn({a})"),
    "aten.rsqrt.default": _fixed("(1.0 / tl.sqrt_rn({a}))"),
    "aten.reciprocal.default": _fixed("(1.0 / {a})"),
    "aten.sin.default": _fixed("libdevice.sin({a})"),
    "aten.cos.default": _fixed("libdevice.cos({a})"),
    "aten.tanh.default": _fixed("_st_tanh({a})"),
    "aten.erf.default": _fixed("tl.erf({a})"),
    "aten.sigmoid.default": _fixed("(1.0 / (1.0 + tl.exp(-{a})))"),
    "aten.silu.default": _fixed("({a} / (1.0 + tl.exp(-{a})))"),
    "aten.gelu.default": _gelu,
    "aten.relu.default": _fixed(_max("{a}", "0.0")),
    "aten.elu.default": _elu,
    "aten.leaky_relu.default": _leaky,
    "aten.hardtanh.default": lambda a, k: _clamp(*hardtanh_bounds(a)),
    "aten.softplus.default": _softplus,
    "aten.clamp.default": lambda a, k: _clamp(*clamp_bounds(a, k)),
    "aten.clamp_min.default": lambda a, k: _clamp(a[1], None),
    "aten.clamp_max.default": lambda a, k: _clamp(None, a[1]),
    "aten.maximum.default": _fixed(_max("{a}", "{b}")),
    "aten.minimum.default": _fixed(_min("{a}", "{b}")),
    "aten.pow.Tensor_Scalar": _pow_scalar,
    "aten.pow.Tensor_Tensor": _fixed("libdevice.pow({a}, {b})"),
    "aten.where.self": _fixed("tl.where({a} != 0.0, {b}, {c})"),
    "aten.masked_fill.Scalar": _fixed("tl.where({b} != 0.0, {c}, {a})"),
    "aten.masked_fill.Tensor": _fixed("tl.where({b} != 0.0, {c}, {a})"),
    "aten.eq.Scalar": _flag("{a} == {b}"),
    "aten.eq.Tensor": _flag("{a} == {b}"),
    "aten.ne.Scalar": _flag("{a} != {b}"),
    "aten.ne.Tensor": _flag("{a} != {b}"),
    "aten.lt.Scalar": _flag("{a} < {b}"),
    "aten.lt.Tensor": _flag("{a} < {b}"),
    "aten.le.Scalar": _flag("{a} <= {b}"),
    "aten.le.Tensor": _flag("{a} <= {b}"),
    "aten.gt.Scalar": _flag("{a} > {b}"),
    "aten.gt.Tensor": _flag("{a} > {b}"),
    "aten.ge.Scalar": _flag("{a} >= {b}"),
    "aten.ge.Tensor": _flag("{a} >= {b}"),
    "aten.logical_not.default": _flag("{a} == 0.0"),
    "aten.bitwise_not.default": _flag("{a} == 0.0"),
    "aten.logical_and.default": _flag("({a} != 0.0) & ({b} != 0.0)"),
    "aten.logical_or.default": _flag("({a} != 0.0) | ({b} != 0.0)"),
    "aten.isnan.default": _flag("{a} != {a}"),
    "aten.isinf.default": _flag("tl.abs({a}) == _INF"),
    "aten.sign.default": _fixed("(({a} > 0.0).to(tl.float32) - ({a} < 0.0).to(tl.float32))"),
    "aten.floor.default": _fixed("tl.floor({a})"),
    "aten.ceil.default": _fixed("tl.ceil({a})"),
    "aten.round.default": _fixed("libdevice.rint({a})"),
    "aten.trunc.default": _fixed("tl.where({a} < 0.0, tl.ceil({a}), tl.floor({a}))"),
    "aten._to_copy.default": _fixed("{a}"),
    "prims.convert_element_type.default": _fixed("{a}"),
}

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
