"""What the template Coder knows about each aten op: its class and its CUDA expression.

Classes: ``pointwise`` (one value per element, broadcasting), ``view`` (moves or
reinterprets elements: an index map, no arithmetic), ``reduction`` (sum / mean /
amax / amin / prod over some dimensions), ``library`` (GEMMs: cuBLAS through
torch), ``creation`` (constants). Anything else is ``torch``: left as PyTorch and
reported as uncovered.

Expressions are C over ``float`` operands (everything is computed in fp32 and
stored in the node's dtype); booleans are 0.f / 1.f.
"""

from __future__ import annotations

import math
import struct
from typing import Any, Callable

from attrs import define

from stitch_lsp.plan import library_calls, pooling

VIEW_OPS = {
    "aten.view.default", "aten._unsafe_view.default", "aten.reshape.default", "aten.alias.default",
    "aten.clone.default", "aten.detach.default", "aten.unsqueeze.default", "aten.squeeze.dim",
    "aten.squeeze.dims", "aten.squeeze.default", "aten.expand.default", "aten.permute.default",
    "aten.t.default", "aten.transpose.int", "aten.slice.Tensor", "aten.cat.default",
    "aten.lift_fresh_copy.default", "aten.contiguous.default", "aten.select.int", "aten.flip.default",
    "aten.repeat.default", "aten.index.Tensor", "aten.unfold.default", "aten.constant_pad_nd.default",
    "aten.roll.default",
}
# Views that copy: every output element is an input element (or, padded, a constant), in new memory. Left to PyTorch at the
# end of a graph they would be PyTorch work in the candidate's forward; written as a kernel they are a copy.
# A traced ``clone`` is one too: the trace records one where eager copied (``.contiguous()`` of a transposed or
# sliced tensor, a ``reshape`` that cannot view). It is written as a kernel only of a value known row-major
# (``fusion._fused_kind``); of forward's inputs or an attention call's output it stays PyTorch's one copy.
# Library calls whose result is a new row-major tensor whatever their inputs' strides.
ROW_MAJOR_RESULTS = {
    "aten.addmm.default", "aten.mm.default", "aten.bmm.default", "aten.baddbmm.default", "aten.linear.default",
    "aten._addmm_activation.default", "aten.addmv.default", "aten.mv.default",
}
COPYING_VIEW_OPS = {"aten.cat.default", "aten.flip.default", "aten.repeat.default", "aten.constant_pad_nd.default",
                    "aten.roll.default", "aten.clone.default"}
REDUCTION_OPS = {
    "aten.sum.dim_IntList": "sum", "aten.sum.default": "sum", "aten.mean.dim": "mean",
    "aten.mean.default": "mean", "aten.amax.default": "max", "aten.amin.default": "min",
    "aten.prod.dim_int": "prod",
    # gather along the reduced dimension: the one element of the row whose position is the index.
    "aten.gather.default": "gather",
    # The position of the first maximum / minimum (NaN counts as the maximum and the minimum, as in eager).
    "aten.argmax.default": "argmax", "aten.argmin.default": "argmin",
    "aten.any.dim": "max", "aten.any.dims": "max", "aten.any.default": "max",
    "aten.all.dim": "min", "aten.all.dims": "min", "aten.all.default": "min",
}
# Reductions whose result is not a float: a position (int64) or a truth value (bool).
INDEX_REDUCTIONS = {"argmax", "argmin"}
LOGICAL_REDUCTIONS = {"aten.any.dim", "aten.any.dims", "aten.any.default", "aten.all.dim", "aten.all.dims",
                      "aten.all.default"}
# Running sums / products along one dimension.
SCAN_OPS = {"aten.cumsum.default": "sum", "aten.cumprod.default": "prod"}
# Copies into the graph's own inputs: a module's buffers updated in place (BatchNorm's running statistics).
UPDATE_OPS = {"aten.copy_.default"}
LIBRARY_OPS = library_calls.LIBRARY_OPS
EMPTY_OPS = {"aten.empty.memory_format", "aten.empty_like.default", "aten.empty_permuted.default",
             "aten.empty_strided.default"}
CREATION_OPS = EMPTY_OPS | {"aten.scalar_tensor.default", "aten.full.default", "aten.full_like.default", "aten.arange.default",
                "aten.arange.start", "aten.arange.start_step", "aten.zeros_like.default", "aten.ones_like.default",
                "aten.zeros.default", "aten.ones.default"}
FLOAT_DTYPES = {"float32", "float16", "bfloat16"}
# Integer values (class indices, masks) ride along as floats: exact below 2**24.
KERNEL_DTYPES = FLOAT_DTYPES | {"bool", "int64", "int32"}

C_TYPES = {"float32": "float", "float16": "__half", "bfloat16": "__nv_bfloat16", "bool": "bool",
           "int64": "long long", "int32": "int"}
DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "bool": 1, "float64": 8, "int64": 8, "int32": 4}


def c_float(value: Any) -> str:
    """A float literal C understands, infinities and NaN included."""
    v = float(value)
    if math.isnan(v):
        return "__int_as_float(0x7fffffff)"
    if math.isinf(v):
        return "__int_as_float(0x7f800000)" if v > 0 else "__int_as_float(0xff800000)"
    text = repr(v)
    if "e" not in text and "." not in text:
        text += ".0"
    return text + "f"


# What each parametrised op's arguments mean (shared by the CUDA templates here and the Triton ones of
# the GEMM family, plan/gemm_ops.py).


def gelu_is_tanh(args, kw) -> bool:
    return (kw.get("approximate") or (args[1] if len(args) > 1 else "none")) == "tanh"


def add_alpha(args, kw) -> Any:
    return kw.get("alpha", args[2] if len(args) > 2 else 1)


def clamp_bounds(args, kw) -> tuple[Any, Any]:
    return kw.get("min", args[1] if len(args) > 1 else None), kw.get("max", args[2] if len(args) > 2 else None)


def hardtanh_bounds(args) -> tuple[float, float]:
    return float(args[1]) if len(args) > 1 else -1.0, float(args[2]) if len(args) > 2 else 1.0


def elu_params(args) -> tuple[float, float, float]:
    """(alpha, scale, input_scale)."""
    return (float(args[1]) if len(args) > 1 else 1.0, float(args[2]) if len(args) > 2 else 1.0,
            float(args[3]) if len(args) > 3 else 1.0)


def leaky_slope(args) -> float:
    return float(args[1]) if len(args) > 1 else 0.01


def softplus_params(args) -> tuple[float, float]:
    """(beta, threshold)."""
    return float(args[1]) if len(args) > 1 else 1.0, float(args[2]) if len(args) > 2 else 20.0


@define(frozen=True)
class Dialect:
    """How one kernel language spells the pointwise templates: CUDA C here, Triton for the GEMM family's
    epilogues (``gemm_ops``). ``column``: its column in ``TEMPLATES``."""

    column: int
    literal: Callable[[Any], str]  # a float literal
    zero: str
    one: str
    select: Callable[[str, str, str], str]  # (condition, then, else)
    at_least: Callable[[str, str], str]  # (expression, bound): a clamp's lower bound, NaN kept
    at_most: Callable[[str, str], str]
    fn: dict[str, str]  # exp, expm1, log1p, tanh, erf, sqrt, pow, floor, trunc


def bounded(lo: Any, hi: Any, literal: Callable[[Any], str], at_least, at_most) -> str:
    expr = "{a}"
    if lo is not None:
        expr = at_least(expr, literal(lo))
    if hi is not None:
        expr = at_most(expr, literal(hi))
    return expr


def _clamp(d: Dialect, lo: Any, hi: Any) -> str:
    return bounded(lo, hi, d.literal, d.at_least, d.at_most)


def _alpha(d: Dialect, args, kw, sign: str) -> str:
    alpha = add_alpha(args, kw)
    return "({a} %s {b})" % sign if alpha in (1, 1.0) else "({a} %s %s * {b})" % (sign, d.literal(alpha))


def _gelu(d: Dialect, args, kw) -> str:
    half, lit = d.literal(0.5), d.literal
    if gelu_is_tanh(args, kw):
        inner = f"{lit(0.7978845608028654)} * ({{a}} + {lit(0.044715)} * {{a}} * {{a}} * {{a}})"
        return f"({half} * {{a}} * ({d.one} + {d.fn['tanh']}({inner})))"
    return f"({half} * {{a}} * ({d.one} + {d.fn['erf']}({{a}} * {lit(0.7071067811865476)})))"


def pow_scalar_template(args, *, sqrt: str, power: str, one: str, literal) -> str:
    """``x ** e`` for a constant e: products, a square root or a reciprocal where exact, else ``power``."""
    e = float(args[1])
    if e == 2.0:
        return "({a} * {a})"
    if e == 3.0:
        return "({a} * {a} * {a})"
    if e == 0.5:
        return sqrt + "({a})"
    if e == 1.0:
        return "{a}"
    if e == -1.0:
        return f"({one} / {{a}})"
    return f"{power}({{a}}, {literal(e)})"


def _pow_scalar(d: Dialect, args, kw) -> str:
    return pow_scalar_template(args, sqrt=d.fn["sqrt"], power=d.fn["pow"], one=d.one, literal=d.literal)


def _elu(d: Dialect, args, kw) -> str:
    alpha, scale, input_scale = elu_params(args)
    lit = d.literal
    return d.select(f"{{a}} > {d.zero}", f"{lit(scale)} * {{a}}",
                    f"{lit(alpha * scale)} * {d.fn['expm1']}({lit(input_scale)} * {{a}})")


def _leaky(d: Dialect, args, kw) -> str:
    return d.select(f"{{a}} > {d.zero}", "{a}", f"{d.literal(leaky_slope(args))} * {{a}}")


def _softplus(d: Dialect, args, kw) -> str:
    beta, threshold = (d.literal(v) for v in softplus_params(args))
    return d.select(f"{{a}} * {beta} > {threshold}", "{a}", f"{d.fn['log1p']}({d.fn['exp']}({{a}} * {beta})) / {beta}")


def _div_mode(d: Dialect, args, kw) -> str:
    mode = kw.get("rounding_mode")
    if mode in ("trunc", "floor"):
        return f"{d.fn[mode]}({{a}} / {{b}})"
    return "({a} / {b})"


def _both(form):
    return form, form


# op -> (CUDA, Triton) template over {a} {b} {c}, the op's tensor/scalar operands in order: a string, or a
# function of (dialect, args, kwargs) where the op's arguments shape it; None where the dialect has no form.
TEMPLATES: dict[str, tuple[Any, Any]] = {
    "aten.add.Tensor": _both(lambda d, a, k: _alpha(d, a, k, "+")),
    "aten.add.Scalar": _both(lambda d, a, k: _alpha(d, a, k, "+")),
    "aten.sub.Tensor": _both(lambda d, a, k: _alpha(d, a, k, "-")),
    "aten.sub.Scalar": _both(lambda d, a, k: _alpha(d, a, k, "-")),
    "aten.rsub.Scalar": _both("({b} - {a})"),
    "aten.rsub.Tensor": _both("({b} - {a})"),
    "aten.mul.Tensor": _both("({a} * {b})"),
    "aten.mul.Scalar": _both("({a} * {b})"),
    "aten.div.Tensor": _both("({a} / {b})"),
    "aten.div.Scalar": _both("({a} / {b})"),
    "aten.div.Tensor_mode": _both(_div_mode),
    "aten.neg.default": _both("(-{a})"),
    "aten.abs.default": ("fabsf({a})", "tl.abs({a})"),
    "aten.exp.default": ("expf({a})", "tl.exp({a})"),
    "aten.exp2.default": ("exp2f({a})", "tl.exp2({a})"),
    "aten.expm1.default": ("expm1f({a})", "_st_expm1({a})"),
    "aten.log.default": ("logf({a})", "tl.log({a})"),
    "aten.log2.default": ("log2f({a})", "tl.log2({a})"),
    "aten.log1p.default": ("log1pf({a})", "_st_log1p({a})"),
    "aten.sqrt.default": ("sqrtf({a})", "tl.sqrt_rn({a})"),
    "aten.rsqrt.default": ("rsqrtf({a})", "(1.0 / tl.sqrt_rn({a}))"),
    "aten.reciprocal.default": ("(1.f / {a})", "(1.0 / {a})"),
    "aten.sin.default": ("sinf({a})", "libdevice.sin({a})"),
    "aten.cos.default": ("cosf({a})", "libdevice.cos({a})"),
    "aten.tanh.default": ("tanhf({a})", "_st_tanh({a})"),
    "aten.erf.default": ("erff({a})", "tl.erf({a})"),
    "aten.sigmoid.default": ("(1.f / (1.f + expf(-{a})))", "(1.0 / (1.0 + tl.exp(-{a})))"),
    "aten.silu.default": ("({a} / (1.f + expf(-{a})))", "({a} / (1.0 + tl.exp(-{a})))"),
    "aten.gelu.default": _both(_gelu),
    "aten.relu.default": ("({a} < 0.f ? 0.f : {a})", "tl.maximum({a}, 0.0, propagate_nan=tl.PropagateNan.ALL)"),
    "aten.elu.default": _both(_elu),
    "aten.leaky_relu.default": _both(_leaky),
    "aten.hardtanh.default": _both(lambda d, a, k: _clamp(d, *hardtanh_bounds(a))),
    "aten.softplus.default": _both(_softplus),
    "aten.clamp.default": _both(lambda d, a, k: _clamp(d, *clamp_bounds(a, k))),
    "aten.clamp_min.default": _both(lambda d, a, k: _clamp(d, a[1], None)),
    "aten.clamp_max.default": _both(lambda d, a, k: _clamp(d, None, a[1])),
    # A tensor bound (a 0-d one from a decomposition, say): x below it takes it; NaN in x or in the bound gives
    # NaN, as eager's does.
    "aten.clamp_min.Tensor": ("(({b} != {b} || {a} < {b}) ? {b} : {a})", "tl.where(({b} != {b}) | ({a} < {b}), {b}, {a})"),
    "aten.clamp_max.Tensor": ("(({b} != {b} || {a} > {b}) ? {b} : {a})", "tl.where(({b} != {b}) | ({a} > {b}), {b}, {a})"),
    "aten.maximum.default": ("(({a} != {a} || {a} > {b}) ? {a} : {b})",
                             "tl.maximum({a}, {b}, propagate_nan=tl.PropagateNan.ALL)"),
    "aten.minimum.default": ("(({a} != {a} || {a} < {b}) ? {a} : {b})",
                             "tl.minimum({a}, {b}, propagate_nan=tl.PropagateNan.ALL)"),
    "aten.pow.Tensor_Scalar": _both(_pow_scalar),
    "aten.pow.Tensor_Tensor": ("powf({a}, {b})", "libdevice.pow({a}, {b})"),
    "aten.where.self": ("({a} != 0.f ? {b} : {c})", "tl.where({a} != 0.0, {b}, {c})"),
    "aten.masked_fill.Scalar": ("({b} != 0.f ? {c} : {a})", "tl.where({b} != 0.0, {c}, {a})"),
    "aten.masked_fill.Tensor": ("({b} != 0.f ? {c} : {a})", "tl.where({b} != 0.0, {c}, {a})"),
    # Comparisons and logic give 1.0 / 0.0 in both dialects.
    "aten.eq.Scalar": ("(float)({a} == {b})", "({a} == {b}).to(tl.float32)"),
    "aten.eq.Tensor": ("(float)({a} == {b})", "({a} == {b}).to(tl.float32)"),
    "aten.ne.Scalar": ("(float)({a} != {b})", "({a} != {b}).to(tl.float32)"),
    "aten.ne.Tensor": ("(float)({a} != {b})", "({a} != {b}).to(tl.float32)"),
    "aten.lt.Scalar": ("(float)({a} < {b})", "({a} < {b}).to(tl.float32)"),
    "aten.lt.Tensor": ("(float)({a} < {b})", "({a} < {b}).to(tl.float32)"),
    "aten.le.Scalar": ("(float)({a} <= {b})", "({a} <= {b}).to(tl.float32)"),
    "aten.le.Tensor": ("(float)({a} <= {b})", "({a} <= {b}).to(tl.float32)"),
    "aten.gt.Scalar": ("(float)({a} > {b})", "({a} > {b}).to(tl.float32)"),
    "aten.gt.Tensor": ("(float)({a} > {b})", "({a} > {b}).to(tl.float32)"),
    "aten.ge.Scalar": ("(float)({a} >= {b})", "({a} >= {b}).to(tl.float32)"),
    "aten.ge.Tensor": ("(float)({a} >= {b})", "({a} >= {b}).to(tl.float32)"),
    "aten.logical_not.default": ("(float)({a} == 0.f)", "({a} == 0.0).to(tl.float32)"),
    "aten.bitwise_not.default": ("(float)({a} == 0.f)", "({a} == 0.0).to(tl.float32)"),
    "aten.logical_and.default": ("(float)({a} != 0.f && {b} != 0.f)", "(({a} != 0.0) & ({b} != 0.0)).to(tl.float32)"),
    "aten.logical_or.default": ("(float)({a} != 0.f || {b} != 0.f)", "(({a} != 0.0) | ({b} != 0.0)).to(tl.float32)"),
    "aten.isnan.default": ("(float)({a} != {a})", "({a} != {a}).to(tl.float32)"),
    "aten.isinf.default": ("(float)isinf({a})", "(tl.abs({a}) == _INF).to(tl.float32)"),
    "aten.sign.default": ("(float)(({a} > 0.f) - ({a} < 0.f))",
                          "(({a} > 0.0).to(tl.float32) - ({a} < 0.0).to(tl.float32))"),
    "aten.floor.default": ("floorf({a})", "tl.floor({a})"),
    "aten.ceil.default": ("ceilf({a})", "tl.ceil({a})"),
    "aten.round.default": ("rintf({a})", "libdevice.rint({a})"),
    "aten.trunc.default": ("truncf({a})", "tl.where({a} < 0.0, tl.ceil({a}), tl.floor({a}))"),
    "aten._to_copy.default": _both("{a}"),
    "prims.convert_element_type.default": _both("{a}"),
    "aten.fill.Scalar": (lambda d, a, k: d.literal(a[1]), None),
}


def pointwise_table(dialect: Dialect) -> dict[str, Callable[[list, dict], str]]:
    """op -> function(args, kwargs) -> the dialect's template over {a} {b} {c}."""
    table: dict[str, Callable[[list, dict], str]] = {}
    for op, forms in TEMPLATES.items():
        form = forms[dialect.column]
        if isinstance(form, str):
            table[op] = lambda args, kw, text=form: text
        elif form is not None:
            table[op] = lambda args, kw, make=form: make(dialect, args, kw)
    return table


CUDA = Dialect(
    column=0, literal=c_float, zero="0.f", one="1.f",
    select=lambda c, x, y: f"({c} ? {x} : {y})",
    at_least=lambda e, v: f"({e} < {v} ? {v} : {e})",
    at_most=lambda e, v: f"({e} > {v} ? {v} : {e})",
    fn={"exp": "expf", "expm1": "expm1f", "log1p": "log1pf", "tanh": "tanhf", "erf": "erff", "sqrt": "sqrtf",
        "pow": "powf", "floor": "floorf", "trunc": "truncf"},
)
POINTWISE = pointwise_table(CUDA)

_NORMAL_MIN = 1.1754943508222875e-38
_FLOAT_MAX = 3.4028234663852886e38


def _reciprocal(value: Any) -> str | None:
    """``1 / value`` as a float literal when multiplying by it stands in for dividing (normal, finite)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    v = float(value)
    if v == 0.0 or not math.isfinite(v) or not _NORMAL_MIN < abs(1.0 / v) < _FLOAT_MAX:
        return None
    return c_float(1.0 / v)


def _fast_div(args, kw) -> str:
    # By a constant: a multiply by its reciprocal, as eager PyTorch does for a Python-number divisor.
    recip = _reciprocal(args[1]) if len(args) > 1 else None
    return "({a} * %s)" % recip if recip else "stitch_div({a}, {b})"


def _fast_fns(half: bool) -> tuple[str, str]:
    """(divide, exp) for a kernel whose outputs are all half precision, or not."""
    return ("stitch_div_fast", "stitch_exp_fast") if half else ("__fdividef", "expf")


def _fast_gelu(args, kw, half: bool) -> str | None:
    if half and (kw.get("approximate") or (args[1] if len(args) > 1 else "none")) == "none":
        return "stitch_gelu_erf_fast({a})"
    return None


def _fast_elu(args, kw, half: bool) -> str:
    alpha, scale, input_scale = elu_params(args)
    arg = "{a}" if input_scale == 1.0 else "%s * {a}" % c_float(input_scale)
    # Only x <= 0 reaches expm1: exp(x) - 1 is off by at most 1.2e-7 there, far below a half-precision ulp.
    em1 = f"(stitch_exp_fast({arg}) - 1.f)" if half else f"stitch_expm1({arg})"
    pos = "{a}" if scale == 1.0 else "%s * {a}" % c_float(scale)
    neg = em1 if alpha * scale == 1.0 else "%s * %s" % (c_float(alpha * scale), em1)
    return f"({{a}} > 0.f ? {pos} : {neg})"


def _fast_clamp(args, kw) -> str:
    return bounded(*clamp_bounds(args, kw), c_float, lambda e, v: f"stitch_max_nan({e}, {v})",
                   lambda e, v: f"stitch_min_nan({e}, {v})")


# Cheaper expressions the pointwise kernels use where a value does not feed a comparison or rounding (see
# ``Emitter.exact``): 2-ulp division (PTX div.full, what Triton emits), branch-free expm1, one-instruction
# NaN-propagating clamps. Each is within a few fp32 ulps of the exact form; NaN / ±Inf behave as in eager.
# op -> function(args, kwargs, half) -> template or None (use POINTWISE), half = every output of the kernel is
# fp16 / bf16 (then exp and divide may be the single-instruction approximations).
FAST_POINTWISE = {
    "aten.div.Tensor": lambda a, k, h: _fast_div(a, k),
    "aten.div.Scalar": lambda a, k, h: _fast_div(a, k),
    "aten.reciprocal.default": lambda a, k, h: "stitch_div(1.f, {a})",
    # 1 + exp(-x) >= 1, so the approximate divide's only weak range (|b| > 2**126) gives 0 for a result < 1e-37.
    "aten.sigmoid.default": lambda a, k, h: "%s(1.f, 1.f + %s(-{a}))" % _fast_fns(h),
    "aten.silu.default": lambda a, k, h: "%s({a}, 1.f + %s(-{a}))" % _fast_fns(h),
    "aten.gelu.default": _fast_gelu,
    "aten.elu.default": _fast_elu,
    "aten.relu.default": lambda a, k, h: "stitch_max_nan({a}, 0.f)",
    "aten.clamp.default": lambda a, k, h: _fast_clamp(a, k),
    "aten.clamp_min.default": lambda a, k, h: _fast_clamp(["x", a[1], None], {}),
    "aten.clamp_max.default": lambda a, k, h: _fast_clamp(["x", None, a[1]], {}),
    "aten.hardtanh.default": lambda a, k, h: _fast_clamp(["x", *hardtanh_bounds(a)], {}),
    "aten.maximum.default": lambda a, k, h: "stitch_max_nan({a}, {b})",
    "aten.minimum.default": lambda a, k, h: "stitch_min_nan({a}, {b})",
}

# Ops whose result is a discrete function of their operands: a value feeding one must be computed exactly as
# eager does (a last-ulp difference could flip the result), so it takes the POINTWISE form.
DISCRETE_OPS = {
    "aten.eq.Scalar", "aten.eq.Tensor", "aten.ne.Scalar", "aten.ne.Tensor", "aten.lt.Scalar", "aten.lt.Tensor",
    "aten.le.Scalar", "aten.le.Tensor", "aten.gt.Scalar", "aten.gt.Tensor", "aten.ge.Scalar", "aten.ge.Tensor",
    "aten.logical_not.default", "aten.bitwise_not.default", "aten.logical_and.default", "aten.logical_or.default",
    "aten.isnan.default", "aten.isinf.default", "aten.sign.default", "aten.floor.default", "aten.ceil.default",
    "aten.round.default", "aten.trunc.default", "aten.div.Tensor_mode",
}

# Ops whose result is one of their value operands or its negation: exact in those operands' dtype, so a
# half-precision result needs no rounding when its operands are already half values. op -> value operand positions.
SELECTING_OPS = {
    "aten.neg.default": (0,), "aten.abs.default": (0,), "aten.relu.default": (0,), "aten.clamp.default": (0,),
    "aten.clamp_min.default": (0,), "aten.clamp_max.default": (0,), "aten.hardtanh.default": (0,),
    "aten.maximum.default": (0, 1), "aten.minimum.default": (0, 1), "aten.where.self": (1, 2),
    "aten.masked_fill.Scalar": (0, 2), "aten.masked_fill.Tensor": (0, 2), "aten._to_copy.default": (0,),
    "prims.convert_element_type.default": (0,),
}
# The constant operands (bounds) of the selecting ops above, which must be representable too.
SELECTING_CONSTANTS = {
    "aten.clamp.default": (1, 2), "aten.clamp_min.default": (1,), "aten.clamp_max.default": (1,),
    "aten.hardtanh.default": (1, 2),
}


def representable(value: Any, dtype: str) -> bool:
    """``value`` is exactly a ``dtype`` number (so selecting it needs no rounding)."""
    if isinstance(value, bool):
        return True
    if not isinstance(value, (int, float)):
        return False
    v = float(value)
    if math.isnan(v) or math.isinf(v):
        return True
    try:
        as32 = struct.unpack("<f", struct.pack("<f", v))[0]
    except OverflowError:
        return False
    if as32 != v:
        return False
    if dtype == "bfloat16":
        return struct.unpack("<I", struct.pack("<f", v))[0] & 0xFFFF == 0
    if dtype == "float16":
        try:
            return struct.unpack("<e", struct.pack("<e", v))[0] == v
        except (OverflowError, struct.error):
            return False
    return dtype == "float32"


# How many leading positional args are operands (the rest shape the expression); default: all.
OPERAND_COUNT = {
    "aten.gelu.default": 1, "aten.elu.default": 1, "aten.leaky_relu.default": 1,
    "aten.hardtanh.default": 1, "aten.softplus.default": 1, "aten.clamp.default": 1,
    "aten.clamp_min.default": 1, "aten.clamp_max.default": 1, "aten.pow.Tensor_Scalar": 1,
    "aten.add.Tensor": 2, "aten.add.Scalar": 2, "aten.sub.Tensor": 2, "aten.sub.Scalar": 2,
    "aten.rsub.Scalar": 2, "aten.rsub.Tensor": 2, "aten.fill.Scalar": 0,
}

# FLOPs per element, roughly (for the plan): transcendental ops count as several.
FLOPS = {"aten.exp.default": 4, "aten.erf.default": 8, "aten.tanh.default": 6, "aten.gelu.default": 10,
         "aten.sigmoid.default": 5, "aten.silu.default": 6, "aten.log.default": 4, "aten.rsqrt.default": 2,
         "aten.softplus.default": 8, "aten.elu.default": 5}


def classify(op: str, dtype: str) -> str:
    if op in pooling.WINDOW_OPS and dtype in FLOAT_DTYPES:
        return "window"
    if op in LIBRARY_OPS:
        return "library"
    if op in CREATION_OPS:
        return "creation"
    if op in VIEW_OPS:
        return "view" if dtype in KERNEL_DTYPES else "torch"
    if op in REDUCTION_OPS:
        if REDUCTION_OPS[op] in INDEX_REDUCTIONS:
            return "reduction" if dtype == "int64" else "torch"
        if dtype in FLOAT_DTYPES or (op in LOGICAL_REDUCTIONS and dtype == "bool"):
            return "reduction"
        # A count (a sum of booleans or integers): accumulated in fp32, exact below 2**24.
        return "reduction" if REDUCTION_OPS[op] == "sum" and dtype in ("int64", "int32") else "torch"
    if op in SCAN_OPS:
        return "scan" if dtype in FLOAT_DTYPES else "torch"
    if op in UPDATE_OPS:
        return "update"
    if op in POINTWISE:
        return "pointwise" if dtype in KERNEL_DTYPES else "torch"
    return "torch"


def short(op: str) -> str:
    """``aten.add.Tensor`` -> ``add`` (for messages)."""
    parts = op.split(".")
    return parts[1] if len(parts) > 1 else op
