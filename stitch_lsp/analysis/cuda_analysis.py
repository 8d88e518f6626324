"""CUDA analysis of one file: kernels, launches, shared memory, barriers, rule findings.

``analyze_cuda(text, path)`` is the entry point. It is pure (no I/O, no compiler) and
fast on large files:

* each path keeps its last tree, so a new version of the text is parsed
  incrementally (tree-sitter reuses what did not change);
* results are cached per function, keyed by the function's own text, so only the
  functions an edit touched are analysed again.

Broken parses: a function whose own subtree contains a syntax error (an ERROR or a
MISSING node) gets no rule findings at all — its facts (name, parameters, launches)
are still reported, marked ``parse_ok=False``. Functions that parse cleanly keep
their findings, so a half-typed kernel does not hide real problems elsewhere in the
file. ``CudaAnalysis.parse_ok`` is False whenever the file has any syntax error, and
``syntax_errors`` says where, so the editor can show one "does not parse" message.
"""

from __future__ import annotations

import bisect
import contextlib
import gc
import hashlib
import logging
import threading
from collections import OrderedDict

from attrs import frozen
from tree_sitter import Node, Point, Tree

from stitch_lsp.analysis import rules as rule_registry
from stitch_lsp.analysis.cuda_consts import Constants
from stitch_lsp.analysis.cuda_declarations import kernel_info
from stitch_lsp.analysis.cuda_facts import BLOCK_BARRIERS, WARP_BARRIERS, build_facts
from stitch_lsp.analysis.cuda_grammar import new_parser
from stitch_lsp.analysis.cuda_model import (
    BarrierInfo, CudaAnalysis, KernelInfo, LaunchInfo, SharedDecl, shift_barrier, shift_finding, shift_kernel,
    shift_launch, shift_shared,
)
from stitch_lsp.analysis.cuda_suppress import ignore_comments, split_ignored
from stitch_lsp.analysis.cuda_text import Columns, encode_source, node_text, operands, squash
from stitch_lsp.analysis.rules.base import Emitter, FileView
from stitch_lsp.findings import Finding, Position, Range

log = logging.getLogger(__name__)

MAX_SYNTAX_ERRORS = 50
_CONTAINERS = frozenset({"translation_unit", "declaration_list", "preproc_ifdef", "preproc_if",
                         "preproc_else", "preproc_elif", "preproc_elifdef"})


@frozen
class UnitResult:
    """What one function contributes to the file's analysis (absolute ranges at ``row``)."""

    row: int
    kernel: KernelInfo | None
    launches: tuple[LaunchInfo, ...]
    shared_decls: tuple[SharedDecl, ...]
    barriers: tuple[BarrierInfo, ...]
    findings: tuple[Finding, ...]
    parse_ok: bool = True

    def moved_to(self, row: int) -> "UnitResult":
        d = row - self.row
        return UnitResult(
            row, shift_kernel(self.kernel, d) if self.kernel is not None else None,
            tuple(shift_launch(x, d) for x in self.launches), tuple(shift_shared(x, d) for x in self.shared_decls),
            tuple(shift_barrier(x, d) for x in self.barriers), tuple(shift_finding(x, d) for x in self.findings),
            self.parse_ok,
        )


class _Unit:
    __slots__ = ("fn", "unit", "is_prototype")

    def __init__(self, fn: Node, unit: Node, is_prototype: bool):
        self.fn = fn  # function_definition, or a declaration for a prototype
        self.unit = unit  # the same, or its template_declaration
        self.is_prototype = is_prototype


class _Top:
    """What one top-level node of the file contributes: its functions and constants.

    Kept between versions of a document: a top-level node the edit did not touch is
    reused (moved) without looking at its subtree again.
    """

    __slots__ = ("start", "end", "units", "entries", "values", "macros", "includes")

    def __init__(self, start: int, end: int):
        self.start, self.end = start, end
        self.units: list[_Unit] = []  # fresh nodes to analyse (empty for a reused record)
        self.entries: list[tuple[tuple, UnitResult]] = []  # (cache key, result) once analysed
        self.values: list[tuple[str, str]] = []
        self.macros: list[str] = []
        self.includes: list[str] = []

    def move(self, byte_delta: int, row_delta: int) -> "_Top":
        """Move this record (in place: the previous version's records are not used again)."""
        self.start += byte_delta
        self.end += byte_delta
        if row_delta:
            self.entries = [(k, r.moved_to(r.row + row_delta)) for k, r in self.entries]
        return self


def _visit_top(src: bytes, node: Node) -> _Top:
    top = _Top(node.start_byte, node.end_byte)
    units, values, macros, includes = top.units, top.values, top.macros, top.includes

    def visit_one(node: Node) -> None:
        t = node.type
        if t == "function_definition":
            units.append(_Unit(node, node, False))
        elif t == "template_declaration":
            inner = next((c for c in operands(node) if c.type in ("function_definition", "declaration")), None)
            if inner is not None and inner.type == "function_definition":
                units.append(_Unit(inner, node, False))
            elif inner is not None and _is_cuda_prototype(inner):
                units.append(_Unit(inner, node, True))
        elif t == "declaration":
            if _is_cuda_prototype(node):
                units.append(_Unit(node, node, True))
            else:
                _collect_const(src, node, values)
        elif t == "linkage_specification":
            body = node.child_by_field_name("body")
            if body is None:
                return
            if body.type == "function_definition":
                units.append(_Unit(body, body, False))
            elif body.type == "declaration" and _is_cuda_prototype(body):
                units.append(_Unit(body, body, True))
            elif body.type == "declaration_list":
                for c in body.children:
                    visit_one(c)
        elif t == "namespace_definition":
            body = node.child_by_field_name("body")
            if body is not None:
                for c in body.children:
                    visit_one(c)
        elif t == "preproc_if" and _is_if_zero(src, node):
            alternative = node.child_by_field_name("alternative")  # `#if 0` code is dead: only its #else
            if alternative is not None:
                visit_one(alternative)
        elif t in _CONTAINERS:
            for c in node.children:
                visit_one(c)
        elif t == "preproc_def":
            name = node.child_by_field_name("name")
            value = node.child_by_field_name("value")
            if name is not None and value is not None:
                values.append((node_text(src, name), squash(node_text(src, value))))
        elif t == "preproc_function_def":
            name = node.child_by_field_name("name")
            if name is not None:
                macros.append(node_text(src, name))
        elif t == "preproc_include":
            path = node.child_by_field_name("path")
            if path is not None:
                includes.append(node_text(src, path).strip("<>\""))

    visit_one(node)
    return top


def _is_if_zero(src: bytes, node: Node) -> bool:
    cond = node.child_by_field_name("condition")
    return cond is not None and node_text(src, cond).strip() in ("0", "false")


def _constants(tops: list[_Top]) -> Constants:
    return Constants(tuple(v for t in tops for v in t.values), tuple(m for t in tops for m in t.macros),
                     tuple(i for t in tops for i in t.includes))


@frozen
class _Edit:
    """The bytes an edit replaced, and the regions (whole lines, new coordinates) it made dirty."""

    start: int
    old_end: int
    new_end: int
    row_delta: int
    dirty: tuple[tuple[int, int], ...]


def _is_cuda_prototype(decl: Node) -> bool:
    kinds = {c.type for c in decl.children}
    if not kinds & {"__global__", "__device__"}:
        return False
    d = decl.child_by_field_name("declarator")
    return d is not None and d.type == "function_declarator"


def _collect_const(src: bytes, decl: Node, out: list[tuple[str, str]]) -> None:
    quals = {node_text(src, c) for c in decl.children if c.type in ("type_qualifier", "storage_class_specifier")}
    if not quals & {"const", "constexpr"}:
        return
    for d in decl.children_by_field_name("declarator"):
        if d.type == "init_declarator":
            name = d.child_by_field_name("declarator")
            value = d.child_by_field_name("value")
            if name is not None and name.type == "identifier" and value is not None:
                out.append((node_text(src, name), squash(node_text(src, value))))


def _syntax_errors(cols: Columns, root: Node) -> tuple[Range, ...]:
    """ERROR and MISSING nodes, found by descending only into subtrees that have errors."""
    found: list[Range] = []
    stack = [root]
    while stack and len(found) < MAX_SYNTAX_ERRORS:
        n = stack.pop()
        if n.is_error:
            found.append(cols.range(n))
            continue
        if n.is_missing:
            found.append(cols.range(n))
            continue
        broken = [c for c in n.children if c.has_error]
        if not broken and n is not root:
            found.append(cols.range(n))  # the node itself is malformed (e.g. `#in`)
            continue
        stack.extend(reversed(broken))
    return tuple(sorted(found))


def _analyze_unit(src: bytes, cols: Columns, consts: Constants, u: _Unit, path: str) -> UnitResult:
    try:
        return _analyze_function(src, cols, consts, u, path)
    except (RecursionError, ValueError, AttributeError, TypeError, IndexError, KeyError):
        # Pathological input (an expression nested thousands deep) or a bug: this function
        # contributes nothing rather than taking the whole file's analysis down.
        log.exception("analysis of a function in %s failed", path or "<text>")
        return UnitResult(u.unit.start_point.row, None, (), (), (), ())


def _analyze_function(src: bytes, cols: Columns, consts: Constants, u: _Unit, path: str) -> UnitResult:
    row = u.unit.start_point.row
    ok = not u.unit.has_error
    if u.is_prototype:
        k = kernel_info(src, cols, u.fn, u.unit, parse_ok=ok, is_template=u.unit is not u.fn)
        return UnitResult(row, k, (), (), (), ())
    facts = build_facts(src, cols, consts, u.fn, u.unit)
    if facts is None:
        return UnitResult(row, None, (), (), (), ())
    kernel = None
    if facts.is_global or facts.is_device:
        header = (facts.name_node, facts.is_global, facts.is_device, facts.launch_bounds, facts.params)
        kernel = kernel_info(src, cols, u.fn, u.unit, parse_ok=ok, is_template=u.unit is not u.fn, header=header)
    shared = tuple(
        SharedDecl(name=d.name, type_text=d.type_text,
                   size_text=squash(facts.text(d.array_size)) if d.array_size is not None else None,
                   is_extern=d.is_extern, range=cols.range(d.node), function=facts.name)
        for d in facts.decls if d.is_shared
    )
    barriers = tuple(
        BarrierInfo(name=c.name, range=cols.range(c.node), function=facts.name)
        for c in facts.calls if c.name in BLOCK_BARRIERS or c.name in WARP_BARRIERS
    ) + tuple(
        BarrierInfo(name=f"{facts.text(c.node.child_by_field_name('function').child_by_field_name('argument'))}.sync",
                    range=cols.range(c.node), function=facts.name)
        for c in facts.method_calls if c.name == "sync"
    )
    findings: list[Finding] = []
    if ok:
        for rule in rule_registry.FUNCTION_RULES:
            out = Emitter(facts, path, rule.meta)
            try:
                rule.check(facts, out)
            except Exception:  # one rule's bug must not take the analysis down
                log.exception("rule %s failed on %s in %s", rule.meta.code, facts.name, path or "<text>")
                continue
            findings.extend(out.found)
    return UnitResult(row, kernel, tuple(l.info for l in facts.launches), shared, barriers,
                      tuple(sorted(findings, key=lambda f: (f.range, f.code))), ok)


def _common_prefix(a: bytes, b: bytes) -> int:
    n, i, step = min(len(a), len(b)), 0, 4096
    while i + step <= n and a[i:i + step] == b[i:i + step]:
        i += step
    while i < n and a[i] == b[i]:
        i += 1
    return i


def _common_suffix(a: bytes, b: bytes, limit: int) -> int:
    la, lb = len(a), len(b)
    n, k, step = min(la, lb, limit), 0, 4096
    while k + step <= n and a[la - k - step:la - k] == b[lb - k - step:lb - k]:
        k += step
    while k < n and a[la - 1 - k] == b[lb - 1 - k]:
        k += 1
    return k


def _line_end(buf: bytes, offset: int) -> int:
    end = buf.find(b"\n", offset)
    return len(buf) if end < 0 else end


def _point(buf: bytes, offset: int) -> Point:
    return Point(buf.count(b"\n", 0, offset), offset - (buf.rfind(b"\n", 0, offset) + 1))


@contextlib.contextmanager
def _gc_paused():
    """No cyclic GC while analysing: the analysis allocates many small records, and a
    full collection over a server's large heap in the middle of it costs more than the
    analysis itself. Reference counting still frees everything as usual."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


class CudaAnalyzer:
    """Analysis for one document, keeping what the next version of it can reuse."""

    def __init__(self, path: str = ""):
        self.path = path
        self._parser = new_parser()
        self._lock = threading.Lock()
        self._src: bytes | None = None
        self._tree: Tree | None = None
        self._tops_kept: list[_Top] = []
        self._context: bytes = b""
        self._last: CudaAnalysis | None = None

    def analyze(self, text: str) -> CudaAnalysis:
        src = encode_source(text)
        with self._lock, _gc_paused():
            if self._last is not None and src == self._src:
                return self._last
            try:
                tree, edit = self._parse(src)
                result = self._analyze_tree(src, tree, edit)
            except Exception:
                if self._src is None:
                    raise
                # Whatever went wrong reusing the previous version: start over from nothing.
                log.exception("incremental CUDA analysis of %s failed; analysing from scratch", self.path)
                self._reset()
                tree, edit = self._parse(src)
                result = self._analyze_tree(src, tree, edit)
            self._src, self._tree, self._last = src, tree, result
            return result

    def _reset(self) -> None:
        self._src = self._tree = self._last = None
        self._tops_kept = []
        self._context = b""

    def _parse(self, src: bytes) -> tuple[Tree, _Edit | None]:
        old, tree = self._src, self._tree
        if old is None or tree is None:
            return self._parser.parse(src), None
        start = _common_prefix(old, src)
        suffix = _common_suffix(old, src, min(len(old), len(src)) - start)
        old_end, new_end = len(old) - suffix, len(src) - suffix
        old_end_point, new_end_point = _point(old, old_end), _point(src, new_end)
        tree.edit(start_byte=start, old_end_byte=old_end, new_end_byte=new_end,
                  start_point=_point(old, start), old_end_point=old_end_point, new_end_point=new_end_point)
        new_tree = self._parser.parse(src, tree)
        spans = [(start, new_end)] + [(r.start_byte, r.end_byte) for r in tree.changed_ranges(new_tree)]
        dirty = tuple((src.rfind(b"\n", 0, a) + 1, _line_end(src, b)) for a, b in spans)
        return new_tree, _Edit(start, old_end, new_end, new_end_point.row - old_end_point.row, dirty)

    def _tops(self, src: bytes, root: Node, edit: _Edit | None) -> tuple[list[_Top], list[_Top]]:
        """The file's top-level records, and the previous records this version replaced.

        Only the top-level nodes that overlap what the edit changed (the edited lines,
        and wherever tree-sitter says the syntax changed) are visited; the records
        before them are kept as they are, those after them are moved.
        """
        old = self._tops_kept
        if edit is None or not old:
            return [_visit_top(src, c) for c in root.children], old
        lo = min(a for a, _ in edit.dirty)
        hi = max(b for _, b in edit.dirty)
        delta = edit.new_end - edit.old_end
        count = root.child_count
        # The first top-level node reaching the dirty region (binary search; child(i) is cheap).
        a, b = 0, count
        while a < b:
            mid = (a + b) // 2
            if root.child(mid).end_byte < lo:
                a = mid + 1
            else:
                b = mid
        visited: list[_Top] = []
        i = a
        while i < count:
            node = root.child(i)
            if node.start_byte > hi:
                break
            visited.append(_visit_top(src, node))
            i += 1
        start = visited[0].start if visited else (root.child(a).start_byte if a < count else len(src))
        end = visited[-1].end if visited else start
        # Before the dirty region nothing moved; after it, everything moved by `delta` bytes.
        keep_before = bisect.bisect_right([t.end for t in old], start) if start > 0 else 0
        while keep_before and old[keep_before - 1].end > start:
            keep_before -= 1
        after = bisect.bisect_left([t.start for t in old], end - delta)
        if after < keep_before:
            return [_visit_top(src, c) for c in root.children], old
        before, replaced, tail = old[:keep_before], old[keep_before:after], old[after:]
        if delta or edit.row_delta:
            tail = [t.move(delta, edit.row_delta) for t in tail]
        return before + visited + tail, replaced

    def _analyze_tree(self, src: bytes, tree: Tree, edit: _Edit | None) -> CudaAnalysis:
        root = tree.root_node
        cols = Columns(src)
        tops, replaced = self._tops(src, root, edit)
        consts = _constants(tops)
        # One short digest of the file-level context goes into every function's cache key.
        context = hashlib.blake2b(repr(consts).encode(), digest_size=16).digest()
        if context != self._context and edit is not None:
            # Constants changed: every function is looked at again.
            tops, replaced = [_visit_top(src, c) for c in root.children], self._tops_kept
        # Functions of replaced records whose own text did not change are reused by key.
        cache = {key: result for top in replaced for key, result in top.entries}
        results: list[UnitResult] = []
        for top in tops:
            if top.units:
                top.entries = [self._unit_result(src, cols, consts, context, u, cache) for u in top.units]
                top.units = []  # nodes of this tree must not outlive it
            for _, result in top.entries:
                results.append(result)
        self._tops_kept = tops
        self._context = context

        definitions = {r.kernel.name for r in results if r.kernel is not None and r.kernel.body_range is not None}
        kernels, device_fns = [], []
        for r in results:
            k = r.kernel
            if k is None or (k.body_range is None and k.name in definitions):
                continue
            (kernels if k.is_global else device_fns).append(k)
        launches = tuple(l for r in results for l in r.launches)
        findings = [f for r in results for f in r.findings]
        # File-scope rules see only what comes from functions that parse.
        sound_kernels = tuple(k for k in kernels if k.parse_ok)
        sound_launches = tuple(l for r in results if r.parse_ok for l in r.launches)
        file_findings = self._file_findings(sound_kernels, sound_launches)
        if file_findings:  # function results are already in document order
            findings.extend(file_findings)
            findings.sort(key=lambda f: (f.range.start.line, f.range.start.character, f.code))
        kept, dropped = split_ignored(findings, ignore_comments(src))
        errors = _syntax_errors(cols, root) if root.has_error else ()
        return CudaAnalysis(
            path=self.path, parse_ok=not root.has_error, syntax_errors=errors,
            kernels=tuple(kernels), device_functions=tuple(device_fns), launches=launches,
            shared_decls=tuple(s for r in results for s in r.shared_decls),
            barriers=tuple(b for r in results for b in r.barriers),
            findings=kept, suppressed=dropped,
        )

    def _unit_result(self, src: bytes, cols: Columns, consts: Constants, context: bytes,
                     u: _Unit, cache: dict[tuple, UnitResult]) -> tuple[tuple, UnitResult]:
        node = u.unit
        line_start = node.start_byte - node.start_point.column
        key = (src[line_start:node.start_byte], src[node.start_byte:node.end_byte], context, node.has_error)
        hit = cache.get(key)
        row = node.start_point.row
        if hit is None:
            hit = _analyze_unit(src, cols, consts, u, self.path)
        elif hit.row != row:
            hit = hit.moved_to(row)
        return key, hit

    def _file_findings(self, kernels: tuple[KernelInfo, ...], launches: tuple[LaunchInfo, ...]) -> list[Finding]:
        view = FileView(self.path, kernels, launches)
        out: list[Finding] = []
        for rule in rule_registry.FILE_RULES:
            emitter = Emitter(None, self.path, rule.meta)
            try:
                rule.check_file(view, lambda rng, msg, fix=None, e=emitter: e.emit(rng, msg, fix=fix))
            except Exception:
                log.exception("rule %s failed in %s", rule.meta.code, self.path or "<text>")
                continue
            out.extend(emitter.found)
        return out


_ANALYZERS: OrderedDict[str, CudaAnalyzer] = OrderedDict()
_ANALYZERS_LOCK = threading.Lock()
MAX_DOCUMENTS = 32


def analyzer_for(path: str) -> CudaAnalyzer:
    with _ANALYZERS_LOCK:
        a = _ANALYZERS.get(path)
        if a is None:
            a = _ANALYZERS[path] = CudaAnalyzer(path)
            while len(_ANALYZERS) > MAX_DOCUMENTS:
                _ANALYZERS.popitem(last=False)
        else:
            _ANALYZERS.move_to_end(path)
        return a


def forget(path: str) -> None:
    """Drop what is kept for a document (call when it is closed)."""
    with _ANALYZERS_LOCK:
        _ANALYZERS.pop(path, None)


def warm_up() -> None:
    """Load the grammar and compile the queries now (a few hundred ms, once per process),
    so the first document's analysis does not pay for it. Safe to call from a thread."""
    CudaAnalyzer("").analyze("__global__ void warm_up(float* y) { y[threadIdx.x] = 0.0f; }")


def analyze_cuda(text: str, path: str = "") -> CudaAnalysis:
    """Analyse a CUDA source text. Reuses the previous analysis of the same path where it can."""
    return analyzer_for(path).analyze(text)


def kernel_at(analysis: CudaAnalysis, position: Position) -> KernelInfo | None:
    """The kernel or device function whose definition (template header, signature, name
    or body) contains ``position``, or the kernel a launch at ``position`` calls."""
    for k in (*analysis.kernels, *analysis.device_functions):
        if k.range.contains(position):
            return k
    for launch in analysis.launches:
        if launch.range.contains(position):
            name = launch.kernel.split("::")[-1]
            matches = [k for k in analysis.kernels if k.name.split("::")[-1] == name]
            if matches:
                return next((k for k in matches if k.body_range is not None), matches[0])
    return None
