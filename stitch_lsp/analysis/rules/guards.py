"""Which code runs for which threads: bounds checks, early exits, divergent conditions."""

from __future__ import annotations

from tree_sitter import Node

from stitch_lsp.analysis.cuda_facts import Control, FunctionFacts, contains_return, is_relational


def _exits(node: Node) -> Node | None:
    """The consequence of an `if` when it leaves the function or the loop iteration."""
    return node.child_by_field_name("consequence")


def _exit_table(facts: FunctionFacts) -> tuple[list[Control], list[tuple[Control, list[Control]]]]:
    """Every `if` whose consequence returns, and every one that leaves a loop iteration
    (with the loops around it), computed once per function."""
    hit = facts.memo.get("exit_table")
    if hit is None:
        returns, loop_exits = [], []
        for c in facts.controls:
            if c.kind != "if":
                continue
            cons = _exits(c.node)
            if cons is None:
                continue
            if contains_return(cons):
                returns.append(c)
            elif _has_loop_exit(cons):
                loops = facts.loops_over(c.node.start_byte)
                if loops:
                    loop_exits.append((c, loops))
        hit = facts.memo["exit_table"] = (returns, loop_exits)
    return hit


def early_exits(facts: FunctionFacts, before: int) -> list[Control]:
    """`if (...) return;` (or `continue`/`break` in a loop) that ends before byte ``before``."""
    returns, loop_exits = _exit_table(facts)
    out = [c for c in returns if c.end <= before]
    out += [c for c, loops in loop_exits if c.end <= before and any(l.governs(before) for l in loops)]
    out.sort(key=lambda c: c.node.start_byte)
    return out


def _has_loop_exit(node: Node) -> bool:
    stack = [node]
    while stack:
        n = stack.pop()
        if n.type in ("continue_statement", "break_statement"):
            return True
        if n.type in ("for_statement", "while_statement", "do_statement", "switch_statement"):
            continue
        stack.extend(n.children)
    return False


def is_check(facts: FunctionFacts, cond: Node | None) -> bool:
    """A condition that can be a bounds check: a comparison, or a `bool` flag the kernel
    computed (`bool valid = x < w && y < h; ... if (valid)`)."""
    if cond is None:
        return False
    if is_relational(facts, cond):
        return True
    for name in facts.refs(cond):
        d = facts.local(name)
        if d is not None and d.type_text.replace("const ", "") == "bool":
            return True
    return False


_LEAVES = frozenset({"return", "break", "continue"})


def is_bounds_checked(facts: FunctionFacts, byte: int) -> bool:
    """A comparison decides whether code at ``byte`` runs: an enclosing if/loop/ternary
    condition, or an earlier early exit."""
    for c in facts.controls_over(byte):
        if is_check(facts, c.cond):
            return True
    # A statement the grammar could not read may be the check (`if (...) return;` in it).
    if any(s.end <= byte and s.names & _LEAVES for s in facts.unknown):
        return True
    returns, loop_exits = _exit_table(facts)
    first = facts.memo.get("first_checked_return")
    if first is None:
        ends = [c.end for c in returns if is_check(facts, c.cond)]
        first = facts.memo["first_checked_return"] = min(ends, default=-1)
    if 0 <= first <= byte:
        return True
    return any(c.end <= byte and is_check(facts, c.cond) and any(l.governs(byte) for l in loops)
               for c, loops in loop_exits)


def thread_dependent_control(facts: FunctionFacts, byte: int) -> Control | None:
    """The innermost condition over ``byte`` whose outcome differs between threads of a block."""
    hit = None
    for c in facts.controls_over(byte):
        if c.cond is not None and facts.depends_on_thread(c.cond):
            hit = c
    return hit


def thread_dependent_exit(facts: FunctionFacts, byte: int) -> Control | None:
    """The first `if (...) return;` before ``byte`` that only some threads take."""
    divergent = facts.memo.get("divergent_returns")
    if divergent is None:
        returns, _ = _exit_table(facts)
        divergent = facts.memo["divergent_returns"] = [
            c for c in returns if c.cond is not None and facts.depends_on_thread(c.cond)]
    return next((c for c in divergent if c.end <= byte), None)


def thread_dependent_loop_exit(facts: FunctionFacts, byte: int) -> tuple[Control, str] | None:
    """A `break` (anywhere in the loop) or a `continue` (before ``byte``) that only some threads
    take, leaving an iteration of a loop around ``byte``: (the `if`, "break" or "continue")."""
    _, loop_exits = _exit_table(facts)
    for c, loops in loop_exits:
        if not loops[-1].governs(byte) or c.cond is None or not facts.depends_on_thread(c.cond):
            continue
        kind = _loop_exit_kind(c.node.child_by_field_name("consequence"))
        if kind == "break" or (kind == "continue" and c.end <= byte):
            return c, kind
    return None


def _loop_exit_kind(node: Node | None) -> str | None:
    stack = [node] if node is not None else []
    found = None
    while stack:
        n = stack.pop()
        if n.type == "break_statement":
            return "break"
        if n.type == "continue_statement":
            found = "continue"
        if n.type in ("for_statement", "while_statement", "do_statement", "switch_statement"):
            continue
        stack.extend(n.children)
    return found


def _grid_wide(facts: FunctionFacts, node: Node | None) -> bool:
    """An expression that steps by the whole grid (`gridDim.x * blockDim.x`, `grid.size()`)."""
    if node is None:
        return False
    names = facts.closure(facts.refs(node))
    if any(n.startswith("gridDim.") for n in names):
        return True
    for n in names:
        d = facts.local(n)
        if d is not None and ("grid_group" in d.type_text or
                              (d.value is not None and "this_grid" in facts.text(d.value))):
            return True
    return False


_ORDERING = frozenset({"<", "<=", ">", ">="})


def comparisons(facts: FunctionFacts, cond: Node | None, through: tuple[str, ...] = ("&&", "||")) -> list[Node]:
    """The ordering comparisons (`<`, `<=`, `>`, `>=`) of a condition, found through
    parentheses and the logical operators in ``through``."""
    out, stack = [], [cond] if cond is not None else []
    while stack:
        n = stack.pop()
        if n.type == "parenthesized_expression":
            stack.extend(n.named_children)
        elif n.type == "binary_expression":
            op = facts.text(n.child_by_field_name("operator"))
            if op in through:
                stack.extend(x for x in (n.child_by_field_name("left"), n.child_by_field_name("right")) if x)
            elif op in _ORDERING:
                out.append(n)
    return out


_MONOTONIC = frozenset({"+", "*", "<<"})


def block_axes(facts: FunctionFacts, node: Node | None, depth: int = 0) -> set[str]:
    """The grid axes along which ``node`` grows with the block index (`blockIdx.x * blockDim.x
    + threadIdx.x`, through plain locals). Masks, remainders and other non-monotone steps
    (`i & (size - 1)`) do not count."""
    if node is None or depth > 8:
        return set()
    t = node.type
    if t == "field_expression":
        text = facts.text(node).replace(" ", "")
        return {text[-1]} if text.startswith("blockIdx.") else set()
    if t in ("parenthesized_expression", "cast_expression"):
        inner = node.child_by_field_name("value") if t == "cast_expression" else (
            node.named_children[0] if node.named_children else None)
        return block_axes(facts, inner, depth + 1)
    if t == "identifier":
        key = facts.key_of(node)
        defs = facts.defs.get(key, [])
        if len(defs) == 1:
            return block_axes(facts, defs[0], depth + 1)
        start = _stepped_start(facts, key)  # `for (i = tid + ...; ...; i += stride)`: grows from its start
        return block_axes(facts, start, depth + 1) if start is not None else set()
    if t == "call_expression":  # `__mul24(blockIdx.x, blockDim.x)`: a product
        fn = node.child_by_field_name("function")
        args = node.child_by_field_name("arguments")
        if fn is None or args is None or facts.text(fn) not in ("__mul24", "__umul24"):
            return set()
        out: set[str] = set()
        for a in args.named_children:
            out |= block_axes(facts, a, depth + 1)
        return out
    if t == "binary_expression":
        op = facts.text(node.child_by_field_name("operator"))
        if op not in _MONOTONIC and op != "-":
            return set()
        left = block_axes(facts, node.child_by_field_name("left"), depth + 1)
        if op == "-":
            return left
        return left | block_axes(facts, node.child_by_field_name("right"), depth + 1)
    return set()


def _stepped_start(facts: FunctionFacts, key: str) -> Node | None:
    """The initial value of a variable that is only ever incremented afterwards (`+=`, `++`)."""
    d = facts.local(key)
    if d is None or d.value is None:
        return None
    for a in facts.assigns:
        left = a.child_by_field_name("left")
        if left is not None and left.type == "identifier" and facts.key_of(left) == key and \
                facts.text(a.child_by_field_name("operator")) != "+=":
            return None
    for u in facts.updates:
        arg = u.child_by_field_name("argument")
        if arg is not None and arg.type == "identifier" and facts.key_of(arg) == key and "--" in facts.text(u):
            return None
    return d.value


def tail_guards(facts: FunctionFacts, cond: Node | None) -> list[tuple[set[str], set[str]]]:
    """The comparisons in ``cond`` of an index that grows with the block index against a
    bound from the kernel's parameters (`i < n`, `x >= width`): the checks a kernel makes
    when the last block may run past the end of its data. (axes, parameter names) each."""
    out: list[tuple[set[str], set[str]]] = []
    for n in comparisons(facts, cond):
        left, right = n.child_by_field_name("left"), n.child_by_field_name("right")
        if left is None or right is None:
            continue
        for index, bound in ((left, right), (right, left)):
            axes = block_axes(facts, index)
            if not axes:
                continue
            fixed = facts.closure(facts.refs(bound))
            params = {x for x in fixed if x in facts.param_names}
            if params and not any(x.startswith(("blockIdx.", "threadIdx.")) for x in fixed):
                out.append((axes, params))
                break
    return out


def kernel_traits(facts: FunctionFacts) -> tuple[tuple[tuple[str, tuple[int, ...]], ...], bool]:
    """(tail bounds, grid_stride) of a kernel: per grid axis, the parameters (by position)
    that a block-derived index is checked against, so it expects a partial last block
    along that axis; and whether it walks its data in a grid-stride loop, so any grid
    size covers all of it."""
    hit = facts.memo.get("kernel_traits")
    if hit is None:
        hit = facts.memo["kernel_traits"] = _kernel_traits(facts)
    return hit


def _kernel_traits(facts: FunctionFacts) -> tuple[tuple[tuple[str, tuple[int, ...]], ...], bool]:
    bounds: dict[str, set[str]] = {}
    stride = False
    for c in facts.controls:
        if c.cond is None or not is_relational(facts, c.cond):
            continue
        for axes, params in tail_guards(facts, c.cond):
            for axis in axes:
                bounds.setdefault(axis, set()).update(params)
        if c.kind == "loop" and not stride:
            update = c.node.child_by_field_name("update")
            body = c.node.child_by_field_name("body")
            if update is not None and _grid_wide(facts, update):
                stride = True
            elif c.node.type == "while_statement" and body is not None and facts.depends_on_thread(c.cond):
                stride = any(body.start_byte <= a.start_byte < body.end_byte and
                             _grid_wide(facts, a.child_by_field_name("right")) for a in facts.assigns)
    position = {p.info.name: i for i, p in enumerate(facts.params)}
    return tuple(sorted((axis, tuple(sorted(position[p] for p in names))) for axis, names in bounds.items())), stride
