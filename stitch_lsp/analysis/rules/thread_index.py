"""How an index moves across the threads of a warp (along threadIdx.x)."""

from __future__ import annotations

import enum

from tree_sitter import Node

from stitch_lsp.analysis.cuda_facts import FunctionFacts
from stitch_lsp.analysis.cuda_text import operands

# Multipliers up to this are per-thread vector chunks (float2/float4-style), not a row stride.
SMALL_STRIDE = 8


# Functions that take their arguments by value (so cannot change an index variable).
_PURE = frozenset({"min", "max", "abs", "fabs", "fabsf", "sqrt", "sqrtf", "rsqrtf", "exp", "expf", "log", "logf",
                   "fminf", "fmaxf", "floor", "floorf", "ceil", "ceilf", "umin", "umax", "static_cast",
                   "reinterpret_cast", "printf", "assert", "tex1Dfetch", "tex2D", "tex3D", "make_float2",
                   "make_float4", "make_int2", "make_uint2", "std::min", "std::max"})


def _qualified_names(facts: FunctionFacts, node: Node) -> set[str]:
    """Names that only appear as the member part of `A::b` inside ``node``."""
    out, stack = set(), [node]
    while stack:
        n = stack.pop()
        if n.type == "qualified_identifier":
            out |= {facts.text(c) for c in n.named_children if c.type == "identifier"}
            continue
        stack.extend(n.named_children)
    return out


class Kind(enum.IntEnum):
    NONE = 0  # does not vary with threadIdx.x
    OTHER = 1  # varies, but not linearly (divided, hashed, data-dependent)
    UNIT = 2  # consecutive threads get consecutive values
    SCALED = 3  # consecutive threads get values a stride apart


class XIndex:
    """How an expression varies across the threads of a warp (threadIdx.x)."""

    def __init__(self, facts: FunctionFacts):
        self.facts = facts
        self.memo: dict[str, tuple[Kind, Node | None]] = {}

    def var(self, name: str) -> tuple[Kind, Node | None]:
        if name in self.memo:
            return self.memo[name]
        if name in self._passed_to_calls():
            # `udivmod(i, n, x)` may write `i` and `x` through references: what they hold is unknown.
            self.memo[name] = (Kind.OTHER, None)
            return self.memo[name]
        self.memo[name] = (Kind.NONE, None)  # cycles (i = i + s) resolve through the other definitions
        best: tuple[Kind, Node | None] = (Kind.NONE, None)
        for value in self.facts.defs.get(name, ()):
            k = self.expr(value)
            if k[0] > best[0]:
                best = k
        self.memo[name] = best
        return best

    def _passed_to_calls(self) -> frozenset[str]:
        """Names passed as plain arguments to functions that are not CUDA or math built-ins."""
        hit = self.facts.memo.get("passed_to_calls")
        if hit is None:
            names = set()
            for c in self.facts.calls:
                short = c.name.split("::")[-1]
                if short.startswith("__") or short in _PURE:
                    continue
                names |= {self.facts.key_of(a) for a in c.args if a.type == "identifier"}
            hit = self.facts.memo["passed_to_calls"] = frozenset(names)
        return hit

    def compile_time(self, node: Node) -> bool:
        """Template parameters, constants and macros: known to the compiler, maybe not to us."""
        f = self.facts
        if node.type == "qualified_identifier":
            return True  # `Vec::size`, `cfg::TILE`: a member constant
        names = f.refs(node) - _qualified_names(f, node)
        if not names:
            return True
        for n in names:
            if "." in n:
                return False
            local = f.local(n)
            if local is not None:
                if not local.is_const:
                    return False
            elif n in f.param_names:
                return False
            elif not (n in f.template_params or n in f.consts or not n.islower()):
                return False
        return True

    def expr(self, node: Node) -> tuple[Kind, Node | None]:
        f = self.facts
        t = node.type
        if t == "field_expression":
            text = f.text(node).replace(" ", "")
            return (Kind.UNIT, None) if text == "threadIdx.x" else (Kind.NONE, None)
        if t == "identifier":
            return self.var(f.key_of(node))
        if t in ("parenthesized_expression",) and len(operands(node)) == 1:
            return self.expr(operands(node)[0])
        if t == "cast_expression":
            v = node.child_by_field_name("value")
            return self.expr(v) if v is not None else (Kind.NONE, None)
        if t == "call_expression":
            fn = node.child_by_field_name("function")
            if fn is not None and fn.type == "field_expression":
                fld = fn.child_by_field_name("field")
                if fld is not None and f.text(fld) == "thread_rank":
                    return (Kind.UNIT, None)
            return (Kind.NONE, None)
        if t != "binary_expression":
            return (Kind.NONE, None)
        op_node = node.child_by_field_name("operator")
        left, right = node.child_by_field_name("left"), node.child_by_field_name("right")
        if op_node is None or left is None or right is None:
            return (Kind.NONE, None)
        op = f.text(op_node)
        lk, rk = self.expr(left), self.expr(right)
        if op in ("+", "-"):
            return max(lk, rk, key=lambda k: k[0])
        if op == "*":
            for mine, other, other_node in ((lk, rk, right), (rk, lk, left)):
                if mine[0] in (Kind.UNIT, Kind.SCALED) and other[0] == Kind.NONE:
                    c = f.resolve_int(other_node)
                    if c is not None and abs(c) <= SMALL_STRIDE:
                        return mine
                    if c is None and self.compile_time(other_node):
                        return mine  # a vector width or tile constant we cannot evaluate: give it the benefit
                    return (Kind.SCALED, mine[1] if mine[0] == Kind.SCALED else node)
            return (Kind.OTHER, None) if max(lk[0], rk[0]) > Kind.NONE else (Kind.NONE, None)
        if op in ("%", "&"):
            return lk if lk[0] == Kind.UNIT else ((Kind.OTHER, None) if lk[0] or rk[0] else (Kind.NONE, None))
        return (Kind.OTHER, None) if max(lk[0], rk[0]) > Kind.NONE else (Kind.NONE, None)
