"""CUDA analysis of one file: kernels, launches, shared memory, barriers, rule findings.

``analyze_cuda(text, path)`` is the entry point. It is pure (no I/O, no compiler) and
fast on large files:

* each path keeps its last tree, so a new version of the text is parsed
  incrementally (tree-sitter reuses what did not change);
* each top-level node's contribution is kept (``cuda_units.TopRecord``): only the
  top-level nodes an edit touched (the edited lines, and wherever tree-sitter says
  the syntax changed) are visited again; the others are reused, moved if lines were
  inserted or removed above them;
* within a revisited node, functions whose own text did not change reuse their
  results (keyed by their text and the file's constants).

Broken parses: a function whose own subtree contains a syntax error (an ERROR or a
MISSING node) gets no rule findings at all, and nothing is built from its body: only
its signature (a KernelInfo marked ``parse_ok=False``) is reported. Functions that parse cleanly keep
their findings, so a half-typed kernel does not hide real problems elsewhere in the
file. ``CudaAnalysis.parse_ok`` is False whenever the file has any syntax error, and
``syntax_errors`` says where, so the editor can show one "does not parse" message.
"""

from __future__ import annotations

import bisect
import contextlib
import gc
import hashlib
import heapq
import logging
import re
import threading
from collections import OrderedDict, deque
from typing import Any, Callable

import attrs
from tree_sitter import Node, Tree

from stitch_lsp.analysis import budget
from stitch_lsp.analysis import rules as rule_registry
from stitch_lsp.analysis.cuda_consts import Constants
from stitch_lsp.analysis.cuda_declarations import function_header, kernel_info
from stitch_lsp.analysis.cuda_facts import BLOCK_BARRIERS, WARP_BARRIERS
from stitch_lsp.analysis.cuda_facts_build import build_facts
from stitch_lsp.analysis.cuda_flow import function_flow
from stitch_lsp.analysis.cuda_grammar import new_parser
from stitch_lsp.analysis.cuda_edits import Edit, common_prefix, common_suffix, line_end, point_at
from stitch_lsp.analysis.cuda_model import BarrierInfo, CudaAnalysis, KernelInfo, SharedDecl
from stitch_lsp.analysis.cuda_preproc import PreprocessedView, preprocess
from stitch_lsp.analysis.cuda_repair import Repaired, Skipped, function_name, repair_function, skipped_note
from stitch_lsp.analysis.cuda_units import TopRecord, Unit, UnitResult, constants_of, visit_top
from stitch_lsp.analysis.cuda_suppress import ignore_comments, split_ignored
from stitch_lsp.analysis.cuda_text import Columns, encode_source, squash
from stitch_lsp.analysis.rules.base import Emitter, FileView
from stitch_lsp.analysis.rules.guards import kernel_traits
from stitch_lsp.findings import Finding, Position, Range, Severity

log = logging.getLogger(__name__)

MAX_SYNTAX_ERRORS = 50
# Function results kept beyond the current version's (see _analyze_tree).
RECENT_SPARE = 256
RECENT_VERSIONS = 16
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


CHUNK = 4096


def _chunks(src: bytes) -> Any:
    """The text for tree-sitter's parser: a large one as a reader of small chunks, so that other
    threads (the server's event loop) get the GIL between them during a long parse."""
    if len(src) <= 64 * CHUNK:
        return src
    view = memoryview(src)
    return lambda byte, _point: bytes(view[byte:byte + CHUNK])


def _longest_line(src: bytes, node: Node) -> int:
    """The 0-based row of the longest line of ``node``'s text (where a budget is spent)."""
    lines = src[node.start_byte:node.end_byte].split(b"\n")
    longest = max(range(len(lines)), key=lambda i: len(lines[i]))
    return node.start_point.row + longest


_ANALYSIS_ERRORS = (RecursionError, ValueError, AttributeError, TypeError, IndexError, KeyError)


def _signature_only(src: bytes, cols: Columns, u: Unit, parse_ok: bool,
                    note: Callable[[KernelInfo], Finding]) -> UnitResult:
    """The signature of a function the rules did not finish, with a hint (``note``) saying why."""
    row = u.unit.start_point.row
    try:
        k = kernel_info(src, cols, u.fn, u.unit, parse_ok=parse_ok, is_template=u.unit is not u.fn)
    except _ANALYSIS_ERRORS:
        k = None
    if k is None:
        return UnitResult(row, None, (), (), (), ())
    return UnitResult(row, k, (), (), (), (note(k),), parse_ok)


def _analyze_unit(src: bytes, cols: Columns, consts: Constants, u: Unit, path: str,
                  conditional: tuple[tuple[int, int], ...] = ()) -> UnitResult:
    try:
        return _analyze_function(src, cols, consts, u, path, conditional)
    except budget.OverBudget as stop:
        line = (stop.row if stop.row is not None else _longest_line(src, u.unit)) + 1
        why = f"Static rules stopped at line {line}: expression too large (nvcc still checks it on save)"
        return _signature_only(src, cols, u, True, lambda k: Finding(
            path=path, range=k.name_range, severity=Severity.HINT, code="budget", message=why, source="stitch"))
    except _ANALYSIS_ERRORS:
        # Pathological input (an expression nested thousands deep) or a bug: this function
        # contributes nothing rather than taking the whole file's analysis down, and says so.
        log.exception("analysis of a function in %s failed", path or "<text>")
        return _signature_only(src, cols, u, False, lambda k: _skipped(
            path, k, "the analysis failed on it (the server log has the details)"))


def _skipped(path: str, k: KernelInfo, why: str) -> Finding:
    """The hint a kernel the rules did not look at gets, saying why."""
    kind = "kernel" if k.is_global else "function"
    return Finding(path=path, range=k.name_range, severity=Severity.HINT, code="parse",
                   message=f"Static rules skipped {kind} `{k.name}`: {why}", source="stitch")


def _analyze_function(src: bytes, cols: Columns, consts: Constants, u: Unit, path: str,
                      conditional: tuple[tuple[int, int], ...]) -> UnitResult:
    row = u.unit.start_point.row
    ok = not u.unit.has_error
    if u.is_prototype:
        k = kernel_info(src, cols, u.fn, u.unit, parse_ok=ok, is_template=u.unit is not u.fn)
        return UnitResult(row, k, (), (), (), ())
    repaired = repair_function(src, u.unit, u.fn) if not ok else None
    if repaired is not None:
        # Each construct the grammar cannot read cost its statement; the rest is analysed.
        return _analyze_repaired(src, cols, consts, u, path, conditional, repaired)
    if not ok:
        # Only the signature of a function whose errors cannot be placed in a statement
        # (an unclosed brace while typing: its "body" can be the rest of the file; skipping
        # it also keeps each keystroke cheap).
        header = function_header(src, cols, u.fn)
        if header is None or not (header[1] or header[2]):
            return UnitResult(row, None, (), (), (), (), False)
        k = kernel_info(src, cols, u.fn, u.unit, parse_ok=False, is_template=u.unit is not u.fn, header=header)
        if k is None or k.body_range is None:
            return UnitResult(row, k, (), (), (), (), False)
        # (No line number in the text: cached results move with the function.)
        note = _skipped(path, k, "tree-sitter's CUDA grammar cannot read it here (the code may well be valid; "
                                 "nvcc reports any real error on save)")
        return UnitResult(row, k, (), (), (), (note,), False)
    return _analyze_facts(src, cols, consts, u.fn, u.unit, path, conditional, row, ok)


def _analyze_repaired(src: bytes, cols: Columns, consts: Constants, u: Unit, path: str,
                      conditional: tuple[tuple[int, int], ...], repaired: Repaired) -> UnitResult:
    row = u.unit.start_point.row
    result = _analyze_facts(repaired.src, cols, consts, repaired.fn, repaired.unit, path, conditional, row, True,
                            repaired.skipped)
    owner = result.kernel.name if result.kernel is not None else function_name(src, u.fn)
    kind = "kernel" if result.kernel is not None and result.kernel.is_global else "function"
    notes = tuple(skipped_note(path, cols, s, kind, owner) for s in repaired.skipped)
    if not notes:
        return result
    findings = tuple(sorted(result.findings + notes, key=lambda f: (f.range, f.code)))
    return attrs.evolve(result, findings=findings)


def _analyze_facts(src: bytes, cols: Columns, consts: Constants, fn: Node, unit: Node, path: str,
                   conditional: tuple[tuple[int, int], ...], row: int, ok: bool,
                   unknown: tuple[Skipped, ...] = ()) -> UnitResult:
    facts = build_facts(src, cols, consts, fn, unit, conditional)
    if facts is None:
        return UnitResult(row, None, (), (), (), ())
    facts.unknown = unknown
    kernel = None
    if facts.is_global or facts.is_device:
        header = (facts.name_node, facts.is_global, facts.is_device, facts.launch_bounds, facts.params)
        kernel = kernel_info(src, cols, fn, unit, parse_ok=ok, is_template=unit is not fn, header=header)
        if kernel is not None and facts.is_global:
            tail_bounds, stride = kernel_traits(facts)
            kernel = attrs.evolve(kernel, tail_bounds=tail_bounds, grid_stride=stride)
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
    for rule in rule_registry.FUNCTION_RULES:
        budget.check()
        out = Emitter(facts, path, rule.meta)
        try:
            rule.check(facts, out)
        except budget.OverBudget:
            raise
        except Exception:  # one rule's bug must not take the analysis down
            log.exception("rule %s failed on %s in %s", rule.meta.code, facts.name, path or "<text>")
            continue
        findings.extend(out.found)
    return UnitResult(row, kernel, tuple(l.info for l in facts.launches), shared, barriers,
                      tuple(sorted(findings, key=lambda f: (f.range, f.code))), ok, function_flow(facts))


_WORD = re.compile(rb"[A-Za-z_]\w*")


def _within(spans: tuple[tuple[int, int], ...], start: int, end: int) -> tuple[tuple[int, int], ...]:
    """The spans (sorted by start) that overlap [start, end)."""
    if not spans:
        return ()
    return tuple(s for s in spans if s[0] < end and s[1] > start)


def _relevant_context(text: bytes, consts: Constants) -> tuple:
    """The part of the file-level context a function's results can depend on: the constants
    it names, and (where it launches kernels) the macros and includes that phrase fixes.
    Keying on this rather than on all constants keeps a function's cached result valid
    while unrelated lines at the top of the file are being edited."""
    names = consts.names()
    used = tuple((n, consts.get(n)) for n in sorted({w.decode() for w in _WORD.findall(text)} & names)) \
        if names else ()
    if b"<<<" in text:
        return used, consts.function_macros, consts.includes
    return used


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
        self._view: PreprocessedView | None = None
        self._tree: Tree | None = None
        self._tops_kept: list[TopRecord] = []
        self._context: bytes = b""
        self._recent: dict[tuple, UnitResult] = {}
        self._live_counts: deque[int] = deque(maxlen=RECENT_VERSIONS)
        self._last: CudaAnalysis | None = None
        # Each file rule's inputs and findings, for the next version (see _file_findings).
        self._file_rule_cache: dict[str, tuple[tuple, tuple[Finding, ...]]] = {}

    def analyze(self, text: str) -> CudaAnalysis:
        src = encode_source(text)
        with self._lock, _gc_paused():
            if self._last is not None and src == self._src:
                return self._last
            view = preprocess(src)
            try:
                tree, edit = self._parse(view.text)
                result = self._analyze_tree(view, src, tree, edit)
            except Exception:
                if self._src is None:
                    raise
                # Whatever went wrong reusing the previous version: start over from nothing.
                log.exception("incremental CUDA analysis of %s failed; analysing from scratch", self.path)
                self._reset()
                tree, edit = self._parse(view.text)
                result = self._analyze_tree(view, src, tree, edit)
            self._src, self._view, self._tree, self._last = src, view, tree, result
            return result

    def _reset(self) -> None:
        self._src = self._view = self._tree = self._last = None
        self._tops_kept = []
        self._context = b""
        self._recent = {}
        self._file_rule_cache = {}
        self._live_counts.clear()

    def _parse(self, src: bytes) -> tuple[Tree, Edit | None]:
        old, tree = (self._view.text if self._view is not None else None), self._tree
        if old is None or tree is None:
            return self._parser.parse(_chunks(src)), None
        start = common_prefix(old, src)
        suffix = common_suffix(old, src, min(len(old), len(src)) - start)
        old_end, new_end = len(old) - suffix, len(src) - suffix
        old_end_point, new_end_point = point_at(old, old_end), point_at(src, new_end)
        tree.edit(start_byte=start, old_end_byte=old_end, new_end_byte=new_end,
                  start_point=point_at(old, start), old_end_point=old_end_point, new_end_point=new_end_point)
        new_tree = self._parser.parse(_chunks(src), tree)
        spans = [(start, new_end)] + [(r.start_byte, r.end_byte) for r in tree.changed_ranges(new_tree)]
        dirty = tuple((src.rfind(b"\n", 0, a) + 1, line_end(src, b)) for a, b in spans)
        return new_tree, Edit(start, old_end, new_end, new_end_point.row - old_end_point.row, dirty)

    def _tops(self, src: bytes, root: Node, edit: Edit | None) -> tuple[list[TopRecord], list[TopRecord]]:
        """The file's top-level records, and the previous records this version replaced.

        Only the top-level nodes that overlap what the edit changed (the edited lines,
        and wherever tree-sitter says the syntax changed) are visited; the records
        before them are kept as they are, those after them are moved.
        """
        old = self._tops_kept
        if edit is None or not old:
            return [visit_top(src, c) for c in root.children], old
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
        visited: list[TopRecord] = []
        i = a
        while i < count:
            node = root.child(i)
            if node.start_byte > hi:
                break
            visited.append(visit_top(src, node))
            i += 1
        start = visited[0].start if visited else (root.child(a).start_byte if a < count else len(src))
        end = visited[-1].end if visited else start
        # Before the dirty region nothing moved; after it, everything moved by `delta` bytes.
        keep_before = bisect.bisect_right([t.end for t in old], start) if start > 0 else 0
        while keep_before and old[keep_before - 1].end > start:
            keep_before -= 1
        after = bisect.bisect_left([t.start for t in old], end - delta)
        if after < keep_before:
            return [visit_top(src, c) for c in root.children], old
        before, replaced, tail = old[:keep_before], old[keep_before:after], old[after:]
        if delta or edit.row_delta:
            tail = [t.move(delta, edit.row_delta) for t in tail]
        return before + visited + tail, replaced

    def _analyze_tree(self, view: PreprocessedView, original: bytes, tree: Tree, edit: Edit | None) -> CudaAnalysis:
        src = view.text
        root = tree.root_node
        cols = Columns(src)
        tops, replaced = self._tops(src, root, edit)
        consts = constants_of(tops)
        context = hashlib.blake2b(repr(consts).encode(), digest_size=16).digest()
        if context != self._context and edit is not None:
            # Constants changed: every function is keyed again (most keep their results:
            # a function's key only holds the constants it names).
            tops, replaced = [visit_top(src, c) for c in root.children], self._tops_kept
        # Functions whose own text did not change are reused by key: from the records this
        # version replaced, or from the last few versions (a half-typed line can make the
        # parser swallow the functions below it for a keystroke or two).
        recent = self._recent
        for top in replaced:
            for key, result in top.entries:
                recent[key] = result
        results: list[UnitResult] = []
        live = 0
        for top in tops:
            if top.units:
                top.entries = [self._unit_result(src, cols, consts, u, recent, view.conditional)
                               for u in top.units]
                top.units = []  # nodes of this tree must not outlive it
            live += len(top.entries)
            for _, result in top.entries:
                results.append(result)
        self._live_counts.append(live)
        cap = 2 * max(self._live_counts) + RECENT_SPARE
        while len(recent) > cap:
            del recent[next(iter(recent))]  # oldest first
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
        flows = tuple(r.flow for r in results if r.parse_ok and r.flow is not None)
        file_findings = self._file_findings(FileView(self.path, sound_kernels, sound_launches, flows, consts.includes))
        if file_findings:  # function results are already in document order: merge, not sort
            order = lambda f: (f.range.start.line, f.range.start.character, f.code)  # noqa: E731
            findings = list(heapq.merge(findings, sorted(file_findings, key=order), key=order))
        kept, dropped = split_ignored(findings, ignore_comments(original))
        errors = _syntax_errors(cols, root) if root.has_error else ()
        return CudaAnalysis(
            path=self.path, parse_ok=not root.has_error, syntax_errors=errors,
            kernels=tuple(kernels), device_functions=tuple(device_fns), launches=launches,
            shared_decls=tuple(s for r in results for s in r.shared_decls),
            barriers=tuple(b for r in results for b in r.barriers),
            findings=kept, suppressed=dropped,
        )

    def _unit_result(self, src: bytes, cols: Columns, consts: Constants, u: Unit, cache: dict[tuple, UnitResult],
                     conditional: tuple[tuple[int, int], ...]) -> tuple[tuple, UnitResult]:
        node = u.unit
        line_start = node.start_byte - node.start_point.column
        text = src[node.start_byte:node.end_byte]
        inside = _within(conditional, node.start_byte, node.end_byte)
        key = (src[line_start:node.start_byte], text, _relevant_context(text, consts), node.has_error,
               tuple((a - node.start_byte, b - node.start_byte) for a, b in inside))
        hit = cache.get(key)
        row = node.start_point.row
        if hit is None:
            with budget.function():
                hit = _analyze_unit(src, cols, consts, u, self.path, inside)
        elif hit.row != row:
            hit = hit.moved_to(row)
        return key, hit

    def _file_findings(self, view: FileView) -> list[Finding]:
        out: list[Finding] = []
        for rule in rule_registry.FILE_RULES:
            inputs = tuple(getattr(view, name) for name in rule.uses)
            kept = self._file_rule_cache.get(rule.meta.code)
            if kept is not None and _same_inputs(kept[0], inputs):
                out.extend(kept[1])  # nothing it reads changed (an edit inside one kernel, for STC009)
                continue
            emitter = Emitter(None, self.path, rule.meta)
            try:
                rule.check_file(view, lambda rng, msg, fix=None, e=emitter: e.emit(rng, msg, fix=fix))
            except Exception:
                log.exception("rule %s failed in %s", rule.meta.code, self.path or "<text>")
                continue
            self._file_rule_cache[rule.meta.code] = (inputs, tuple(emitter.found))
            out.extend(emitter.found)
        return out


def _same_inputs(old: tuple, new: tuple) -> bool:
    """The same records (by identity: a function's results are new objects whenever its text,
    or its place, changed) and equal plain values."""
    for a, b in zip(old, new):
        if isinstance(a, tuple) and a and not isinstance(a[0], str):
            if len(a) != len(b) or any(x is not y for x, y in zip(a, b)):
                return False
        elif a != b:
            return False
    return True


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


def analyze_cuda(text: str, path: str = "", budget_s: float | None = None) -> CudaAnalysis:
    """Analyse a CUDA source text. Reuses the previous analysis of the same path where it can.

    With ``budget_s``, a function whose analysis takes longer than that gets a hint instead of
    findings (``analysis.budget``)."""
    with budget.budget(budget_s):
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
