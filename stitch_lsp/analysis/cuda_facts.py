"""Facts about one CUDA function, from one query pass over its body.

A function (with its template header) is the unit of analysis: rules read these
facts, and results are cached per function text, so an edit re-analyses only the
function it touched. Nothing here walks the whole file. ``cuda_facts_build.build_facts`` makes them.
"""

from __future__ import annotations

import bisect
from typing import Iterable

from attrs import define, field
from tree_sitter import Node

from stitch_lsp.analysis import budget
from stitch_lsp.analysis.cuda_consts import Constants, resolve_int
from stitch_lsp.analysis.cuda_declarations import LocalDecl, Param, find_descendant
from stitch_lsp.analysis.cuda_model import LaunchInfo
from stitch_lsp.analysis.cuda_text import Columns, node_text, operands

BUILTIN_OBJECTS = frozenset({"threadIdx", "blockIdx", "blockDim", "gridDim"})
# cooperative_groups calls that return the calling thread's index.
THREAD_RANK_METHODS = frozenset({"thread_rank", "thread_index"})
BLOCK_BARRIERS = frozenset({"__syncthreads", "__syncthreads_count", "__syncthreads_and",
                            "__syncthreads_or", "__barrier_sync", "cg::sync",
                            "cooperative_groups::sync"})
WARP_BARRIERS = frozenset({"__syncwarp"})
ATOMICS = frozenset(
    f"{op}{scope}"
    for op in ("atomicAdd", "atomicSub", "atomicExch", "atomicMin", "atomicMax", "atomicInc",
               "atomicDec", "atomicCAS", "atomicAnd", "atomicOr", "atomicXor")
    for scope in ("", "_block", "_system")
)
INT64_TYPES = frozenset({"size_t", "int64_t", "uint64_t", "long", "long long", "unsigned long",
                         "unsigned long long", "long int", "long long int", "ptrdiff_t",
                         "ssize_t", "index_t", "std::size_t", "std::int64_t", "long unsigned int"})
INT32_TYPES = frozenset({"int", "unsigned", "unsigned int", "int32_t", "uint32_t", "signed",
                         "signed int", "short", "unsigned short"})
RELATIONAL_OPS = frozenset({"<", "<=", ">", ">=", "==", "!="})


@define(slots=True)
class Control:
    """A construct that decides whether (or how often) code runs: if, loop, ternary."""

    kind: str  # "if" | "loop" | "ternary"
    node: Node
    cond: Node | None
    # Bytes governed by the condition: [gov_start, end).
    gov_start: int
    end: int

    def governs(self, byte: int) -> bool:
        return self.gov_start <= byte < self.end


@define(slots=True)
class Access:
    """``base[i]`` or ``base[i][j]`` (the outermost subscript of a chain)."""

    node: Node
    base: str | None
    indices: tuple[Node, ...]
    index_text: str
    is_write: bool
    is_read: bool
    # Where it happens in evaluation order: an assignment's target is written after its value is read.
    order: int


@define(slots=True)
class Call:
    name: str
    node: Node
    args: tuple[Node, ...]
    bare: bool  # its result is thrown away


@define(slots=True)
class Launch:
    info: LaunchInfo
    node: Node
    config: Node
    config_args: tuple[Node, ...]
    stmt: Node | None


@define(slots=True)
class FunctionFacts:
    src: bytes
    cols: Columns
    consts: Constants
    node: Node  # function_definition
    unit: Node  # the function or its template_declaration
    name: str
    name_node: Node
    is_global: bool
    is_device: bool
    is_host_code: bool  # no __global__ / __device__: runs on the host
    template_params: frozenset[str]
    params: tuple[Param, ...]
    launch_bounds: Node | None
    body: Node | None
    # Byte ranges of code kept inside an `#if` / `#ifdef` branch (see cuda_preproc).
    conditional: tuple[tuple[int, int], ...] = ()
    calls: list[Call] = field(factory=list)
    method_calls: list[Call] = field(factory=list)
    launches: list[Launch] = field(factory=list)
    accesses: list[Access] = field(factory=list)
    assigns: list[Node] = field(factory=list)
    updates: list[Node] = field(factory=list)
    decls: list[LocalDecl] = field(factory=list)
    controls: list[Control] = field(factory=list)
    preprocs: list[Node] = field(factory=list)
    numbers: list[Node] = field(factory=list)
    # number literal id -> the other operand of its binary expression (Node.parent walks from the root:
    # asking it for every literal of a long `1.0 + 1.0 + ...` line was quadratic).
    number_operands: dict[int, Node] = field(factory=dict)
    # `a.x * b.x` products of two builtin fields (checked for blockIdx * blockDim).
    builtin_products: list[Node] = field(factory=list)
    # `a % b` expressions (divisibility tests).
    mods: list[Node] = field(factory=list)
    # name -> value expressions assigned to it (declaration values, `=` and `op=` right sides)
    defs: dict[str, list[Node]] = field(factory=dict)
    # Statements the grammar could not read (cuda_repair.Skipped): each may do anything.
    unknown: tuple = ()
    # Per-function results several rules share (e.g. the shared-memory event list).
    memo: dict[str, object] = field(factory=dict)
    _refs_memo: dict[int, frozenset[str]] = field(factory=dict)
    # Names declared more than once (in different scopes): name -> [(declared at, scope end, key)].
    _scoped: dict[str, list[tuple[int, int, str]]] = field(factory=dict)

    # ---- text and ranges -------------------------------------------------
    def text(self, node: Node) -> str:
        return node_text(self.src, node)

    def range(self, node: Node):
        return self.cols.range(node)

    # ---- names ------------------------------------------------------------
    def key_at(self, name: str, byte: int) -> str:
        """Which declaration of ``name`` is visible at ``byte``: the name itself for a name
        declared once, ``name#k`` for the k-th of several declarations in different scopes."""
        decls = self._scoped.get(name)
        if decls is None:
            return name
        best = name
        for start, end, key in decls:  # by position: the last visible one is the innermost
            if start > byte:
                break
            if byte < end:
                best = key
        return best

    def key_of(self, ident: Node) -> str:
        return self.key_at(self.text(ident), ident.start_byte)

    @property
    def param_names(self) -> dict[str, Param]:
        return {p.info.name: p for p in self.params}

    def local(self, name: str) -> LocalDecl | None:
        table = self.memo.get("locals")
        if table is None:
            table = {}
            for d in self.decls:
                table.setdefault(d.key, d)
            self.memo["locals"] = table
        return table.get(name)

    def shared_names(self) -> frozenset[str]:
        """`__shared__` arrays, and pointers carved out of them (`float* b = smem + n;`)."""
        hit = self.memo.get("shared_names")
        if hit is None:
            names = {d.key for d in self.decls if d.is_shared}
            arrays = set(names)
            for d in self.decls:
                if d.is_pointer and d.value is not None and not d.is_shared:
                    if self.base_names(d.value) & names and not self._per_thread_row(d.value, arrays):
                        names.add(d.key)
            hit = self.memo["shared_names"] = frozenset(names)
        return hit

    def _per_thread_row(self, value: Node, arrays: set[str]) -> bool:
        """`&cs[threadIdx.x][0]`, `cs[tid]`, `smem + threadIdx.x * W`: a pointer to the calling
        thread's own part of a shared array. What goes through it is that thread's alone."""
        n = value
        while n.type in ("parenthesized_expression", "cast_expression"):
            n = n.child_by_field_name("value") if n.type == "cast_expression" else n.named_children[0]
            if n is None:
                return False
        if n.type == "pointer_expression" and n.child_by_field_name("argument") is not None:
            n = n.child_by_field_name("argument")
        if n.type == "subscript_expression":
            chain = n
            while chain.type == "subscript_expression" and chain.child_by_field_name("argument") is not None:
                inner = chain.child_by_field_name("argument")
                if inner.type != "subscript_expression":
                    break
                chain = inner
            idx = chain.child_by_field_name("indices")
            base = chain.child_by_field_name("argument")
            return (base is not None and base.type == "identifier" and self.text(base) in arrays
                    and idx is not None and self._is_thread_index(idx))
        if n.type == "binary_expression" and self.text(n.child_by_field_name("operator")) == "+":
            left, right = n.child_by_field_name("left"), n.child_by_field_name("right")
            for base, offset in ((left, right), (right, left)):
                if base is not None and base.type == "identifier" and self.text(base) in arrays and offset is not None:
                    if offset.type == "binary_expression" and self.text(offset.child_by_field_name("operator")) == "*":
                        a, b = offset.child_by_field_name("left"), offset.child_by_field_name("right")
                        return any(x is not None and self._is_thread_index(x) for x in (a, b)) and not all(
                            x is not None and self.depends_on_thread(x) for x in (a, b))
                    return self._is_thread_index(offset)
        return False

    def _is_thread_index(self, node: Node) -> bool:
        """`threadIdx.x` or a name that is only ever a copy of it (`int tid = threadIdx.x;`)."""
        while node.type in ("parenthesized_expression", "subscript_argument_list") and node.named_children:
            if len(node.named_children) != 1:
                return False
            node = node.named_children[0]
        text = self.text(node).replace(" ", "")
        if text == "threadIdx.x":
            return b"threadIdx.y" not in self.src[self.node.start_byte:self.node.end_byte] and \
                b"threadIdx.z" not in self.src[self.node.start_byte:self.node.end_byte]
        if node.type == "identifier":
            defs = self.defs.get(self.key_of(node), [])
            return len(defs) == 1 and defs[0].id != node.id and self._is_thread_index(defs[0])
        return False

    def global_pointer_names(self) -> frozenset[str]:
        """Pointer parameters and local pointers derived from them."""
        hit = self.memo.get("global_pointer_names")
        if hit is None:
            names = {p.info.name for p in self.params if p.info.is_pointer}
            shared = self.shared_names()
            for d in self.decls:
                if d.is_pointer and d.value is not None and d.key not in shared:
                    if self.base_names(d.value) & names:
                        names.add(d.key)
            hit = self.memo["global_pointer_names"] = frozenset(names)
        return hit

    def type_of(self, name: str) -> str | None:
        d = self.local(name)
        if d is not None:
            return d.type_text
        p = self.param_names.get(name)
        return p.info.type_text if p is not None else None

    def is_int64_name(self, name: str) -> bool:
        t = self.type_of(name)
        if t is None:
            return False
        t = t.replace("const ", "").replace("constexpr ", "").strip()
        return t in INT64_TYPES

    # ---- data flow ----------------------------------------------------------
    def refs(self, node: Node) -> frozenset[str]:
        """Names an expression reads: identifiers, and builtins as "threadIdx.x" etc."""
        key = node.id
        hit = self._refs_memo.get(key)
        if hit is not None:
            return hit
        budget.check()  # each call walks the expression: nested ones make many calls over one text
        out: set[str] = set()
        stack = [node]
        while stack:
            n = stack.pop()
            t = n.type
            if t == "identifier":
                out.add(self.key_of(n))
            elif t == "field_expression":
                arg = n.child_by_field_name("argument")
                fld = n.child_by_field_name("field")
                if arg is not None and arg.type == "identifier" and self.text(arg) in BUILTIN_OBJECTS:
                    out.add(f"{self.text(arg)}.{self.text(fld) if fld is not None else 'x'}")
                elif arg is not None:
                    stack.append(arg)
            elif t == "call_expression":
                fn = n.child_by_field_name("function")
                if fn is not None and fn.type == "field_expression":
                    fld = fn.child_by_field_name("field")
                    if fld is not None and self.text(fld) in THREAD_RANK_METHODS:
                        out.add("threadIdx.x")
                args = n.child_by_field_name("arguments")
                if args is not None:
                    stack.append(args)
                if fn is not None and fn.type != "identifier":
                    stack.append(fn)
            elif t in ("sizeof_expression", "string_literal", "type_descriptor", "template_argument_list"):
                continue
            else:
                stack.extend(n.named_children)
        result = frozenset(out)
        self._refs_memo[key] = result
        return result

    def base_names(self, node: Node) -> set[str]:
        """Names an expression may point into: identifiers outside subscript indices."""
        out: set[str] = set()
        stack = [node]
        while stack:
            n = stack.pop()
            t = n.type
            if t == "identifier":
                out.add(self.key_of(n))
            elif t == "subscript_expression":
                arg = n.child_by_field_name("argument")
                if arg is not None:
                    stack.append(arg)
            elif t in ("call_expression", "sizeof_expression", "type_descriptor", "field_identifier"):
                if t == "call_expression":
                    # A cast-like call (reinterpret_cast<T*>(p)) still points into p.
                    fn = n.child_by_field_name("function")
                    if fn is not None and fn.type == "template_function":
                        args = n.child_by_field_name("arguments")
                        if args is not None:
                            stack.append(args)
                continue
            else:
                stack.extend(n.named_children)
        return out

    def closure(self, names: Iterable[str]) -> frozenset[str]:
        """The names plus everything they were computed from, transitively."""
        out: set[str] = set()
        todo = list(names)
        while todo:
            name = todo.pop()
            if name in out:
                continue
            out.add(name)
            for value in self.defs.get(name, ()):
                todo.extend(self.refs(value) - out)
        return frozenset(out)

    def unknown_names(self) -> frozenset[str]:
        """Every name an unreadable statement mentions: it may write, call or wait on any of them."""
        hit = self.memo.get("unknown_names")
        if hit is None:
            hit = self.memo["unknown_names"] = frozenset(n for s in self.unknown for n in s.names)
        return hit

    def unknown_between(self, start: int, end: int) -> bool:
        """An unreadable statement lies in [start, end): it may be a barrier or a write."""
        return any(s.start < end and s.end > start for s in self.unknown)

    def depends_on_thread(self, node: Node) -> bool:
        return any(n.startswith("threadIdx.") for n in self.closure(self.refs(node)))

    # ---- control flow --------------------------------------------------------
    def _control_tree(self) -> tuple[list[int], list[int]]:
        """Start bytes of the (nested) controls in order, and each one's enclosing control."""
        hit = self.memo.get("control_tree")
        if hit is None:
            starts, parent, stack = [], [], []
            for i, c in enumerate(self.controls):
                start = c.node.start_byte
                while stack and self.controls[stack[-1]].end <= start:
                    stack.pop()
                parent.append(stack[-1] if stack else -1)
                stack.append(i)
                starts.append(start)
            hit = self.memo["control_tree"] = (starts, parent)
        return hit

    def controls_over(self, byte: int) -> list[Control]:
        """The controls governing ``byte``, outermost first (a walk up the nesting, not a scan)."""
        starts, parent = self._control_tree()
        i = bisect.bisect_right(starts, byte) - 1
        chain = []
        while i >= 0:
            c = self.controls[i]
            if c.end > byte:
                if c.governs(byte):
                    chain.append(c)
            i = parent[i]
        chain.reverse()
        return chain

    def loops_over(self, byte: int) -> list[Control]:
        return [c for c in self.controls_over(byte) if c.kind == "loop"]

    def resolve_int(self, node: Node | None) -> int | None:
        if node is None:
            return None
        return resolve_int(self.src, node, self.consts, self._local_consts())

    def _local_consts(self) -> dict[str, Node]:
        hit = self.memo.get("local_consts")
        if hit is None:
            hit = self.memo["local_consts"] = {
                d.name: d.value for d in self.decls
                if d.value is not None and not d.is_pointer and (d.is_const or d.type_text == "dim3")}
        return hit


def index_expr(idx: Node) -> Node:
    """The expression inside a subscript_argument_list (`[i]` -> `i`)."""
    named = operands(idx)
    return named[0] if len(named) == 1 else idx


def is_relational(facts: FunctionFacts, node: Node | None) -> bool:
    """Whether an expression contains a comparison (a bounds check looks like one)."""
    if node is None:
        return False
    stack = [node]
    while stack:
        n = stack.pop()
        if n.type == "binary_expression":
            op = n.child_by_field_name("operator")
            if op is not None and facts.text(op) in RELATIONAL_OPS:
                return True
        if n.type in ("call_expression",):
            continue
        stack.extend(n.named_children)
    return False


def contains_return(node: Node) -> bool:
    return find_descendant(node, {"return_statement"}, stop={"function_definition", "lambda_expression"}) is not None
