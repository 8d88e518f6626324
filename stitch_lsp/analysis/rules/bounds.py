"""Grid-wide indices into global memory, and the bounds check a kernel should make for
them, phrased in the kernel's own names (used by STC001, STC019 and STC020)."""

from __future__ import annotations

import bisect
import re

from attrs import frozen
from tree_sitter import Node

from stitch_lsp.analysis.cuda_facts import INT32_TYPES, INT64_TYPES, Access, FunctionFacts, index_expr, is_relational
from stitch_lsp.analysis.cuda_text import operands, squash
from stitch_lsp.analysis.rules.guards import block_axes, comparisons, tail_guards
from stitch_lsp.analysis.rules.shared_memory import canonical
from stitch_lsp.findings import Fix, Range, TextEdit

_SIZE_TYPES = INT32_TYPES | INT64_TYPES | {"const " + t for t in INT32_TYPES | INT64_TYPES}
_CLAMPS = frozenset({"min", "max", "umin", "umax", "llmin", "llmax", "std::min", "std::max", "clamp", "fminf",
                     "fmaxf"})
# Parameter names that say "how many elements" (compared case-insensitively).
_SIZE_NAME = re.compile(r"^(?:n|num|count|size|len|length|total|numel|nelems?|elems|elements|"
                        r"num_?(?:elements|elems|items|values|points)|\w*(?:_size|size|_len|len|length|count))$",
                        re.I)
# A name for a bound that already includes its last index (`i <= last` is right).
_INCLUSIVE = re.compile(r"last|max|end|upper|hi$|inclusive|limit", re.I)
# Width -> height spellings, to pair the two extents of a 2-D image or matrix.
_PAIRS = (("width", "height"), ("Width", "Height"), ("cols", "rows"), ("Cols", "Rows"), ("ncols", "nrows"),
          ("nx", "ny"), ("NX", "NY"), ("dimx", "dimy"), ("size_x", "size_y"), ("sizeX", "sizeY"))


def grid_index(facts: FunctionFacts, a: Access) -> bool:
    """The access's index varies with both the block and the thread: the last block can
    run past the end of the array."""
    names = set()
    for idx in a.indices:
        names |= facts.refs(index_expr(idx))
    deps = facts.closure(names)
    return any(n.startswith("threadIdx.") for n in deps) and any(n.startswith("blockIdx.") for n in deps)


def _clamp_index(facts: FunctionFacts) -> tuple[list[int], set[str]]:
    """Where clamps are (`min(...)` calls and `c ? a : b` with a comparison, by start byte),
    and the names reset under a comparison of themselves (`if (i > n - 1) i = n - 1;`)."""
    hit = facts.memo.get("clamps")
    if hit is None:
        starts = sorted([c.node.start_byte for c in facts.calls if c.name in _CLAMPS] +
                        [c.node.start_byte for c in facts.controls
                         if c.kind == "ternary" and is_relational(facts, c.cond)])
        reset: set[str] = set()
        for assign in facts.assigns:
            left = assign.child_by_field_name("left")
            if left is None or left.type != "identifier":
                continue
            key = facts.key_of(left)
            if any(c.kind == "if" and c.cond is not None and key in facts.refs(c.cond) and
                   is_relational(facts, c.cond) for c in facts.controls_over(assign.start_byte)):
                reset.add(key)
        hit = facts.memo["clamps"] = (starts, reset)
    return hit


def clamped(facts: FunctionFacts, a: Access) -> bool:
    """The index is clamped into range instead of checked: `y[min(i, n - 1)]`, an index
    computed with `min` or `i < n ? i : n - 1`, or one reset by `if (i > n - 1) i = n - 1;`."""
    starts, reset = _clamp_index(facts)
    names: set[str] = set()
    spans = []
    for idx in a.indices:
        spans.append((idx.start_byte, idx.end_byte))
        names |= {n for n in facts.refs(index_expr(idx)) if "." not in n}
    if names & reset:
        return True
    for name in names:
        for value in facts.defs.get(name, ()):
            spans.append((value.start_byte, value.end_byte))
    for lo, hi in spans:
        i = bisect.bisect_left(starts, lo)
        if i < len(starts) and starts[i] < hi:
            return True
    return False


def per_thread_slot(facts: FunctionFacts, a: Access, grid_stride: bool) -> bool:
    """In a grid-stride kernel the grid is sized by the launcher, not by the data: an array
    the loop never touches, indexed only by the thread's position in the grid
    (`partial[tid]`, `states[tid + gridDim.x * blockDim.x]`), holds slots per thread and is
    sized to the grid."""
    if not grid_stride or _in_loop(facts, a):
        return False
    if any(b.base == a.base and _in_loop(facts, b) for b in facts.accesses):
        return False  # the data the loop walks, not an array of per-thread slots
    names = set()
    for idx in a.indices:
        names |= facts.refs(index_expr(idx))
    deps = facts.closure(names)
    return all(n.startswith(("blockIdx.", "blockDim.", "threadIdx.", "gridDim.")) or facts.local(n) is not None
               for n in deps)


def _in_loop(facts: FunctionFacts, a: Access) -> bool:
    return any(c.kind == "loop" for c in facts.controls_over(a.node.start_byte))


def global_accesses(facts: FunctionFacts):
    """Accesses through the kernel's pointer parameters (or pointers derived from them)."""
    pointers = facts.global_pointer_names()
    return [a for a in facts.accesses if a.base in pointers and a.indices]


@frozen
class Guard:
    """The check that keeps an access in bounds, in the kernel's own names."""

    condition: str | None  # `i < n`, `x < width && y < height`; None: no size to check against
    index: str  # what to check, as written (`i`, `x` and `y`)


def size_name(name: str) -> bool:
    """A parameter name that says "how many elements" (`n`, `count`, `numElements`, `len`)."""
    return _SIZE_NAME.match(name) is not None


def _size_params(facts: FunctionFacts) -> list[str]:
    return [p.info.name for p in facts.params
            if not p.info.is_pointer and p.info.type_text in _SIZE_TYPES]


def _existing_bound(facts: FunctionFacts, axis: str) -> str | None:
    """The bound the kernel already checks a block-derived index against on ``axis``."""
    for c in facts.controls:
        if not tail_guards(facts, c.cond):
            continue
        for cmp in comparisons(facts, c.cond):
            left, right = cmp.child_by_field_name("left"), cmp.child_by_field_name("right")
            if left is None or right is None:
                continue
            for index, bound in ((left, right), (right, left)):
                text = squash(facts.text(bound))
                # `x < width - 1` keeps a stencil inside the image: not the array's extent.
                if axis in block_axes(facts, index) and not block_axes(facts, bound) and "-" not in text:
                    return text
    return None


def _paired(facts: FunctionFacts, width: str) -> str | None:
    """`height` for `width`, `h` for `w`, `ny` for `nx`: the other extent's parameter."""
    names = {p.info.name for p in facts.params}
    for a, b in _PAIRS:
        if a in width:
            other = width.replace(a, b)
            if other in names:
                return other
    for a, b in (("w", "h"), ("W", "H"), ("x", "y"), ("X", "Y")):
        if width.endswith(a) and width[:-1] + b in names:
            return width[:-1] + b
    return None


def _one_d_size(facts: FunctionFacts, axis: str) -> str | None:
    bound = _existing_bound(facts, axis)
    if bound is not None:
        return bound
    sized = [n for n in _size_params(facts) if _SIZE_NAME.match(n)]
    return sized[0] if len(sized) == 1 else None


def suggest_guard(facts: FunctionFacts, a: Access) -> Guard:
    """The bounds check for ``a``: `i < n` for a 1-D index, `x < width && y < height` for
    `y * width + x`; the size comes from a check the kernel already makes on that axis,
    else from a parameter whose name says it is a size. No condition where it cannot tell."""
    node = index_expr(a.indices[-1])
    while node.type == "parenthesized_expression" and len(operands(node)) == 1:
        node = operands(node)[0]
    shown = squash(facts.text(node))
    same = _bound_of(facts, node)
    if same is not None:
        return Guard(f"{shown} < {same}", shown)
    axes = block_axes(facts, node)
    if len(axes) == 1 and node.type in ("identifier", "field_expression", "binary_expression") \
            and _is_single_coordinate(facts, node):
        size = _one_d_size(facts, next(iter(axes)))
        return Guard(f"{shown} < {size}" if size else None, shown)
    two_d = _row_major(facts, node)
    if two_d is None and node.type == "identifier":  # `int i = y * width + x;` ... `a[i]`
        defs = facts.defs.get(facts.key_of(node), [])
        two_d = _row_major(facts, defs[0]) if len(defs) == 1 else None
    if two_d is not None:
        col, row, width = two_d
        height = _paired(facts, width) or _existing_bound(facts, "y")
        if height is not None:
            return Guard(f"{col} < {width} && {row} < {height}", f"{col}` and `{row}")
        return Guard(None, f"{col}` and `{row}")
    return Guard(None, shown)


def _bound_of(facts: FunctionFacts, index: Node) -> str | None:
    """The size the kernel already compares this very index with (`i < n` somewhere)."""
    want = canonical(facts, index)
    for c in facts.controls:
        for cmp in comparisons(facts, c.cond):
            left, right = cmp.child_by_field_name("left"), cmp.child_by_field_name("right")
            op = facts.text(cmp.child_by_field_name("operator"))
            if left is None or right is None:
                continue
            for idx, bound, ok in ((left, right, op in ("<", ">=")), (right, left, op in (">", "<="))):
                if ok and canonical(facts, idx) == want and tail_guards(facts, cmp):
                    return squash(facts.text(bound))
    return None


def _is_single_coordinate(facts: FunctionFacts, node: Node) -> bool:
    """One grid coordinate, not a row-major combination of two (`i`, `blockIdx.x * 256 + t`)."""
    if node.type == "identifier":
        return True
    names = facts.closure(facts.refs(node))
    return len({n[-1] for n in names if n.startswith(("blockIdx.", "threadIdx."))}) == 1


def _row_major(facts: FunctionFacts, node: Node) -> tuple[str, str, str] | None:
    """(column, row, width) for `row * width + col` or `col + row * width`, where `col`
    grows along grid x and `row` along grid y; `width` must be a parameter."""
    if node.type != "binary_expression" or facts.text(node.child_by_field_name("operator")) != "+":
        return None
    left, right = node.child_by_field_name("left"), node.child_by_field_name("right")
    for prod, col in ((left, right), (right, left)):
        if prod is None or col is None or prod.type != "binary_expression" \
                or facts.text(prod.child_by_field_name("operator")) != "*":
            continue
        a, b = prod.child_by_field_name("left"), prod.child_by_field_name("right")
        for row, width in ((a, b), (b, a)):
            if row is None or width is None:
                continue
            if block_axes(facts, row) == {"y"} and block_axes(facts, col) == {"x"} and \
                    squash(facts.text(width)) in facts.param_names:
                return squash(facts.text(col)), squash(facts.text(row)), squash(facts.text(width))
    return None


def wrap_fix(facts: FunctionFacts, a: Access, guard: Guard) -> Fix | None:
    """Guard the statement holding ``a``: `if (cond) stmt;`. Only for a plain statement
    whose expression is the access's own assignment (or a call taking it)."""
    if guard.condition is None:
        return None
    stmt = a.node.parent
    while stmt is not None and stmt.type not in ("expression_statement", "compound_statement", "for_statement",
                                                  "if_statement", "while_statement", "declaration"):
        stmt = stmt.parent
    if stmt is None or stmt.type != "expression_statement":
        return None
    start = facts.cols.start(stmt)
    return Fix(title=f"Guard it: `if ({guard.condition})`",
               edits=(TextEdit(Range(start, start), f"if ({guard.condition}) "),))


def inclusive_name(name: str) -> bool:
    return _INCLUSIVE.search(name) is not None
