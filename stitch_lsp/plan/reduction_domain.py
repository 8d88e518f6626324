"""Where a reduction's rows lie in memory: its source's shape with the reduced dimensions marked.

A reduction over any set of dimensions is seen as ``rows`` rows of ``row_len`` elements: a row
is one combination of the kept coordinates, its elements the reduced ones. The shape is
collapsed first (size-1 dimensions dropped, neighbours that are both kept or both reduced
merged), so ``x.sum((2, 3))`` of NCHW is rows of HW contiguous elements ("trailing"), a
softmax over the channels of NCHW has its kept innermost dimension HW ("columns": rows lie
side by side in memory, a row's elements HW apart), and BatchNorm's statistics over N, H and
W have a few rows of N runs of HW ("runs"). Pure and small; the Planner splits groups by
domain and the kernel writers index with it.
"""

from __future__ import annotations

import math

from attrs import frozen


@frozen
class Domain:
    shape: tuple[int, ...]  # collapsed: no size-1 dims, neighbours alternate kept / reduced
    reduced: tuple[bool, ...]

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def row_len(self) -> int:
        return math.prod(s for s, r in zip(self.shape, self.reduced) if r)

    @property
    def rows(self) -> int:
        return math.prod(s for s, r in zip(self.shape, self.reduced) if not r)

    @property
    def layout(self) -> str:
        """``rows`` (reduced dims last, each row contiguous), ``columns`` (the innermost dim is kept) or
        ``runs`` (the innermost dim is reduced, and so is one further out with a kept one between)."""
        if not self.reduced or not any(self.reduced):
            return "rows"
        if not self.reduced[-1]:
            return "columns"
        return "rows" if len(self.shape) <= 2 else "runs"

    @property
    def inner(self) -> int:
        """Elements between consecutive elements of a row (1 when the innermost dim is reduced)."""
        return 1 if not self.shape or self.reduced[-1] else self.shape[-1]

    @property
    def run(self) -> int:
        """Contiguous elements of a row (the innermost reduced run)."""
        return self.shape[-1] if self.shape and self.reduced[-1] else 1

    def key(self) -> tuple:
        return (self.shape, self.reduced)

    def element(self, row: str, j: str) -> str:
        """C for the linear index of element ``j`` of row ``row`` (64-bit)."""
        if self.layout == "rows":
            return f"({row} * {self.row_len}LL + {j})" if self.rows > 1 else f"({j})"
        strides = contiguous_strides(self.shape)
        kept = [d for d, r in enumerate(self.reduced) if not r]
        red = [d for d, r in enumerate(self.reduced) if r]
        terms = []
        for dims, var in ((kept, row), (red, j)):
            sub = [self.shape[d] for d in dims]
            sub_strides = contiguous_strides(tuple(sub))
            for k, d in enumerate(dims):
                coord = f"{var}" if k == 0 else f"({var} % {sub[k] * sub_strides[k]}LL)"
                if sub_strides[k] != 1:
                    coord = f"({coord} / {sub_strides[k]}LL)"
                terms.append(coord if strides[d] == 1 else f"{coord} * {strides[d]}LL")
        return "(" + " + ".join(terms) + ")"

    def element_py(self, row: int, j: int) -> int:
        """The same index, in Python (checks and host tests)."""
        strides = contiguous_strides(self.shape)
        kept = [d for d, r in enumerate(self.reduced) if not r]
        red = [d for d, r in enumerate(self.reduced) if r]
        total = 0
        for dims, v in ((kept, row), (red, j)):
            sub = [self.shape[d] for d in dims]
            for d, c in zip(dims, _unravel(v, sub)):
                total += c * strides[d]
        return total

    def row_strides(self) -> tuple[int, ...]:
        """Per collapsed dim: the step of the row number (0 on reduced dims)."""
        kept = [s for s, r in zip(self.shape, self.reduced) if not r]
        ks = list(contiguous_strides(tuple(kept)))
        return tuple(0 if r else ks.pop(0) for r in self.reduced)


def contiguous_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    out = [1] * len(shape)
    for d in range(len(shape) - 2, -1, -1):
        out[d] = out[d + 1] * shape[d + 1]
    return tuple(out)


def _unravel(v: int, shape: list[int]) -> list[int]:
    out = []
    for s in reversed(shape):
        out.append(v % s)
        v //= s
    return out[::-1]


def domain_of(shape: tuple[int, ...], dims: list[int]) -> Domain:
    """The collapsed domain of a reduction of a tensor of ``shape`` over ``dims``."""
    red = set(dims)
    out_shape: list[int] = []
    out_red: list[bool] = []
    for d, size in enumerate(shape):
        if size == 1:
            continue
        r = d in red
        if out_shape and out_red[-1] == r:
            out_shape[-1] *= size
        else:
            out_shape.append(size)
            out_red.append(r)
    return Domain(tuple(out_shape), tuple(out_red))


def refine(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...] | None:
    """The coarsest shape both ``a`` and ``b`` are merges of (consecutive dims multiplied), if any."""
    if math.prod(a) != math.prod(b):
        return None
    # Break points: products of trailing dims.
    def points(s):
        out, p = set(), 1
        for d in reversed(s):
            p *= d
            out.add(p)
        return out
    pts = sorted(points(tuple(x for x in a if x != 1)) | points(tuple(x for x in b if x != 1)))
    out, prev = [], 1
    for p in pts:
        if p % prev:
            return None
        out.append(p // prev)
        prev = p
    return tuple(reversed(out)) if out else ()


def _lift(shape: tuple[int, ...], strides: tuple[int, ...], fine: tuple[int, ...]) -> tuple[int, ...] | None:
    """Strides over ``fine`` of a map that is linear over ``shape`` (``fine`` refines ``shape``)."""
    dims = [(s, st) for s, st in zip(shape, strides) if s != 1]
    out: list[int] = []
    k = len(fine) - 1
    for size, stride in reversed(dims):
        acc = 1
        parts: list[int] = []
        while acc < size:
            if k < 0:
                return None
            parts.append(stride * acc)
            acc *= fine[k]
            k -= 1
        if acc != size:
            return None
        out += parts
    return tuple(reversed(out))


def broadcasts_per_row(src: tuple[int, ...], dst: tuple[int, ...], domain: Domain) -> bool:
    """``src`` broadcast into ``dst`` (a tensor of the domain's elements, in their order) gives each element
    its own row's value: the broadcast index of every element is its row number."""
    if math.prod(src) != domain.rows or math.prod(dst) != domain.numel:
        return False
    pad = len(dst) - len(src)
    if pad < 0:
        return False
    full = (1,) * pad + tuple(src)
    sstr = contiguous_strides(full)
    b_strides = []
    for d, size in enumerate(dst):
        if full[d] == size:
            b_strides.append(sstr[d])
        elif full[d] == 1:
            b_strides.append(0)
        else:
            return False
    fine = refine(tuple(dst), domain.shape)
    if fine is None:
        return False
    a = _lift(tuple(dst), tuple(b_strides), fine)
    b = _lift(domain.shape, domain.row_strides(), fine)
    return a is not None and a == b
