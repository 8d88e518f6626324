"""Index arithmetic, as C: a contiguous shape's strides, the coordinates of a linear index, the index a
broadcast reads, and the digits of an index (what is known of each coordinate, so chained views recombine
instead of dividing again).

``Unsupported`` is defined here, at the bottom of the template Coder's imports, because the index maps
already raise it and every kernel writer does too."""

from __future__ import annotations

import math

from attrs import define


class Unsupported(Exception):
    """The group has a pattern the template Coder does not lower (it stays PyTorch)."""


def contiguous_strides(shape: tuple[int, ...]) -> list[int]:
    strides = [1] * len(shape)
    for d in range(len(shape) - 2, -1, -1):
        strides[d] = strides[d + 1] * shape[d + 1]
    return strides


def coords(ix: str, shape: tuple[int, ...]) -> list[str]:
    """C expressions for each coordinate of linear index ``ix`` in ``shape``."""
    strides = contiguous_strides(shape)
    out = []
    for d, (size, stride) in enumerate(zip(shape, strides)):
        if size == 1:
            out.append("0")
            continue
        expr = f"({ix})" if stride == 1 else f"(({ix}) / {stride}LL)"
        if d > 0:
            expr = f"({expr} % {size}LL)"
        out.append(expr)
    return out


def linear(terms: list[tuple[str, int]], offset: int = 0) -> str:
    parts = [f"{c} * {m}LL" if m != 1 else c for c, m in terms if m != 0 and c != "0"]
    if offset:
        parts.append(f"{offset}LL")
    return "(" + " + ".join(parts) + ")" if parts else "0LL"


def broadcast_index(ix: str, dst: tuple[int, ...], src: tuple[int, ...]) -> str:
    """Index into ``src`` of the element at ``ix`` of ``dst`` that ``src`` broadcasts to."""
    if tuple(src) == tuple(dst):
        return ix
    if math.prod(src) == 1:
        return "0LL"
    pad = len(dst) - len(src)
    if pad < 0:
        raise Unsupported(f"cannot broadcast {list(src)} to {list(dst)}")
    full = (1,) * pad + tuple(src)
    sstrides = contiguous_strides(full)
    # Collapse: if src equals dst on a trailing block and is 1 elsewhere, it is a simple modulo.
    c = coords(ix, dst)
    terms = []
    for d in range(len(dst)):
        if full[d] == 1:
            continue
        if full[d] != dst[d]:
            raise Unsupported(f"cannot broadcast {list(src)} to {list(dst)}")
        terms.append((c[d], sstrides[d]))
    # Trailing-suffix shortcut: src non-1 dims are exactly the last k dims of dst.
    k = 0
    while k < len(dst) and full[len(dst) - 1 - k] == dst[len(dst) - 1 - k] and full[len(dst) - 1 - k] != 1:
        k += 1
    if k and all(full[d] == 1 for d in range(len(dst) - k)):
        return f"(({ix}) % {math.prod(dst[len(dst) - k:])}LL)"
    return linear(terms)


def is_row_broadcast(src: tuple[int, ...], dst: tuple[int, ...], row_len: int) -> bool:
    """``src`` holds one value per row of ``dst`` (rows of ``row_len`` trailing elements)."""
    pad = len(dst) - len(src)
    if pad < 0:
        return False
    full = (1,) * pad + tuple(src)
    n = 1
    k = len(dst)
    while k > 0 and n < row_len:
        k -= 1
        n *= dst[k]
    if n != row_len:
        return False
    return all(full[d] == dst[d] for d in range(k)) and all(full[d] == 1 for d in range(k, len(dst)))


@define(frozen=True)
class Digit:
    """One coordinate of an index, as C, with what is known of it.

    ``0 <= value < bound``. ``origin`` = (root index, shape, dim) when the value is that coordinate of the
    root index in that shape, less ``shift``: index maps chained through views and cat branches then
    recombine into ``root + constant`` instead of re-deriving every coordinate with divisions.
    """

    expr: str
    bound: int
    origin: tuple[str, tuple[int, ...], int] | None = None
    shift: int = 0


def _in_branch(c: Digit, start: int, size: int) -> Digit:
    """The cat coordinate ``c`` inside the branch of the input at ``start``: ``c - start``, in [0, size)."""
    if not start:
        return Digit(c.expr, size, c.origin, c.shift)
    return Digit(f"({c.expr} - {start}LL)", size, c.origin, c.shift + start)


def _align(form: tuple[tuple[tuple[Digit, int], ...], int], shape: tuple[int, ...]) -> list[Digit] | None:
    """Coordinates in ``shape`` of sum(digit * stride) + offset when every digit sits on one dimension's
    stride and stays inside it (with that dimension's share of the offset): then they are the digits."""
    terms, offset = form
    strides = contiguous_strides(shape)
    if offset < 0 or offset >= math.prod(shape):
        return None
    extra = [(offset // strides[j]) % shape[j] for j in range(len(shape))]
    if sum(o * st for o, st in zip(extra, strides)) != offset:
        return None
    out: list[Digit | None] = [None] * len(shape)
    for g, st in terms:
        if st == 0 or g.expr == "0":
            continue
        dims = [j for j in range(len(shape)) if strides[j] == st and shape[j] > 1]
        if len(dims) != 1 or out[dims[0]] is not None or g.bound + extra[dims[0]] > shape[dims[0]]:
            return None
        out[dims[0]] = g
    result = []
    for j, g in enumerate(out):
        o = extra[j]
        if g is None:
            result.append(Digit(str(o), o + 1))
        elif o:
            result.append(Digit(f"({g.expr} + {o}LL)", g.bound + o, g.origin, g.shift - o))
        else:
            result.append(g)
    return result
