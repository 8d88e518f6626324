"""Max and average pooling as the template Coder reads them: each op's window, from its traced arguments.

Plain data, no torch. The generated kernels follow aten's CUDA pooling kernels: a max window starts at
-inf, skips the padding and propagates NaN; an average window sums the elements inside the input and
divides by ``divisor_override``, else by the window clipped to the padded input
(``count_include_pad``) or to the input itself. The output sizes (``ceil_mode``'s extra window, which
must start inside the input or its left padding) are the traced node's own shape.
"""

from __future__ import annotations

from typing import Any

from attrs import frozen

# op -> (max | avg, the names of its arguments after the input, in aten's order)
_MAX_ARGS = ("kernel_size", "stride", "padding", "dilation", "ceil_mode")
_AVG_ARGS = ("kernel_size", "stride", "padding", "ceil_mode", "count_include_pad", "divisor_override")
WINDOW_OPS = {
    "aten.max_pool1d.default": ("max", _MAX_ARGS), "aten.max_pool2d.default": ("max", _MAX_ARGS),
    "aten.max_pool3d.default": ("max", _MAX_ARGS),
    "aten.avg_pool1d.default": ("avg", _AVG_ARGS[:5]), "aten.avg_pool2d.default": ("avg", _AVG_ARGS),
    "aten.avg_pool3d.default": ("avg", _AVG_ARGS),
}
# A max pool traced with its indices (max_pool2d is max_pool2d_with_indices and a getitem): op -> the
# values-only op it is when only the values are read.
VALUES_ONLY = {"aten.max_pool2d_with_indices.default": "aten.max_pool2d.default",
               "aten.max_pool3d_with_indices.default": "aten.max_pool3d.default"}


@frozen
class Window:
    how: str  # max | avg
    kernel: tuple[int, ...]  # one entry per pooled (trailing) dimension
    stride: tuple[int, ...]
    padding: tuple[int, ...]
    dilation: tuple[int, ...]
    count_include_pad: bool = True
    divisor_override: int | None = None

    @property
    def dims(self) -> int:
        return len(self.kernel)

    @property
    def size(self) -> int:
        """Elements a window covers."""
        n = 1
        for k in self.kernel:
            n *= k
        return n


def _per_dim(value: Any, dims: int, default: int) -> tuple[int, ...]:
    if value is None or value == []:
        return (default,) * dims
    if isinstance(value, (list, tuple)):
        value = [int(v) for v in value]
        return tuple(value * dims) if len(value) == 1 else tuple(value)
    return (int(value),) * dims


def window_of(op: str, args: list, kwargs: dict) -> Window:
    """The window of a pooling op from its traced arguments (``args[0]`` is the input)."""
    how, names = WINDOW_OPS[op]
    given = dict(zip(names, args[1:]))
    given.update({k: v for k, v in kwargs.items() if k in names})
    kernel = given["kernel_size"]
    dims = len(kernel) if isinstance(kernel, (list, tuple)) else int(op[-10])  # "...max_pool2d.default"
    kernel = _per_dim(kernel, dims, 1)
    stride = _per_dim(given.get("stride"), dims, 0)
    stride = kernel if not any(stride) else stride
    divisor = given.get("divisor_override")
    return Window(how=how, kernel=kernel, stride=stride, padding=_per_dim(given.get("padding"), dims, 0),
                  dilation=_per_dim(given.get("dilation"), dims, 1),
                  count_include_pad=bool(given.get("count_include_pad", True)),
                  divisor_override=int(divisor) if divisor else None)
