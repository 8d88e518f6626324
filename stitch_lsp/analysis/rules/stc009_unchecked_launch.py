"""STC009: a kernel launch whose errors nobody checks.

A file-scope rule: a launch inside a helper is fine when every caller of the helper in
the file checks after the call (a switch of launches in `reduce<T>()`, a check after
`launch_softmax(...)` in its caller). What reads as a check is in ``cuda_flow``.

It reports only where the chain of callers ends without a check at a function that
nothing else in the file can check for: `main`, or a host function of a PyTorch
extension (called from Python). A helper that nothing in the file calls, whose name is
passed around as a value, or that returns a `cudaError_t`, is left alone: its callers
are out of sight.
"""

from __future__ import annotations

from typing import Callable

from stitch_lsp.analysis.cuda_flow import include_edit, is_torch_extension
from stitch_lsp.analysis.cuda_model import FlowStep, FunctionFlow
from stitch_lsp.analysis.rules.base import FileRule, FileView, RuleMeta
from stitch_lsp.findings import Fix, Severity

_ROOTS = frozenset({"main", "wmain"})


def _is_check(step: FlowStep, defined: set[str], checkers: set[str]) -> bool:
    """A check step, or a call of a function of this file that checks. A function of this
    file is judged by its body, not by a name that sounds like a check."""
    if step.kind == "check":
        return not step.name or step.name not in defined or step.name in checkers
    return step.kind == "call" and step.name in checkers


class _Callers:
    """Whether launch errors that leave a function reach one of the file's roots unchecked."""

    def __init__(self, view: FileView):
        self.flows = view.flows
        self.torch = is_torch_extension(view.includes)
        self.defined = {f.name for f in view.flows}
        self.checkers = _checkers(view.flows, self.defined)
        self.calls: dict[str, list[tuple[FunctionFlow, int]]] = {}
        self.passed: set[str] = set()
        for f in view.flows:
            for i, s in enumerate(f.steps):
                if s.kind == "call" or (s.kind == "check" and s.name):
                    self.calls.setdefault(s.name, []).append((f, i))
                elif s.kind == "ref":
                    self.passed.add(s.name)
        self.memo: dict[str, list[str] | None] = {}
        self.last_check: dict[int, int] = {}

    def unchecked_path(self, flow: FunctionFlow) -> list[str] | None:
        """The callers (innermost first) through which an error leaving ``flow`` goes
        unchecked to a root, or None when some caller checks or the callers are unknown."""
        name = flow.name
        if name in self.memo:
            return self.memo[name]
        self.memo[name] = None  # a cycle: assume checked
        result = None
        if flow.returns_status or name in self.passed:
            result = None
        elif name in _ROOTS:
            result = []
        elif name not in self.calls:
            result = [] if self.torch else None
        else:
            for caller, i in self.calls[name]:
                if self.checked_after(caller, i):
                    continue
                up = self.unchecked_path(caller)
                if up is not None:
                    result = [caller.name, *up]
                    break
        self.memo[name] = result
        return result

    def checked_after(self, flow: FunctionFlow, i: int) -> bool:
        last = self.last_check.get(id(flow))
        if last is None:
            last = max((j for j, s in enumerate(flow.steps) if _is_check(s, self.defined, self.checkers)), default=-1)
            self.last_check[id(flow)] = last
        return i < last


def _checkers(flows: tuple[FunctionFlow, ...], defined: set[str]) -> set[str]:
    """Functions of the file that check the launch status (or call one that does)."""
    found: set[str] = set()
    changed = True
    while changed:
        changed = False
        for f in flows:
            if f.name not in found and any(_is_check(s, defined, found) for s in f.steps):
                found.add(f.name)
                changed = True
    return found


class UncheckedLaunch(FileRule):
    meta = RuleMeta("STC009", "unchecked-launch", "Kernel launch whose errors nobody checks", Severity.WARNING)
    uses = ("flows", "includes")

    def check_file(self, view: FileView, emit: Callable[..., None]) -> None:
        if not any(s.kind == "launch" for f in view.flows for s in f.steps):
            return
        callers = _Callers(view)
        for flow in view.flows:
            for i, step in enumerate(flow.steps):
                if step.kind != "launch" or callers.checked_after(flow, i):
                    continue
                path = callers.unchecked_path(flow)
                if path is None:
                    continue
                if path:
                    callers_text = ", ".join(f"`{c}`" for c in path)
                    who = f"neither `{flow.name}` nor its caller{'s' if len(path) > 1 else ''} {callers_text} check"
                else:
                    who = f"`{flow.name}` does not check"
                fix = step.fix
                extra = include_edit(view.includes, step.header)
                if fix is not None and extra is not None:
                    fix = Fix(fix.title, (*fix.edits, extra))
                emit(step.range, f"launch of `{step.name}` is never checked: {who} `cudaGetLastError()` after it, "
                                 f"so a bad configuration or a missing kernel image fails silently", fix)


RULE = UncheckedLaunch()
