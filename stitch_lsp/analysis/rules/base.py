"""What a static rule is, how it reports, and where its documentation lives."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Callable

from attrs import define, field, frozen
from tree_sitter import Node

from stitch_lsp.analysis.cuda_facts import FunctionFacts
from stitch_lsp.analysis.cuda_model import FunctionFlow, KernelInfo, LaunchInfo
from stitch_lsp.findings import Finding, Fix, Position, Range, Severity, TextEdit

DOCS_WEB = "https://github.com/stitch-lsp/stitch/blob/main/docs/rules"
SOURCE = "stitch"


@functools.cache
def doc_url(code: str) -> str:
    """The rule's page: the checkout's own docs when present, else the project's web copy."""
    page = Path(__file__).resolve().parents[3] / "docs" / "rules" / f"{code}.md"
    if page.is_file():
        return page.as_uri()
    return f"{DOCS_WEB}/{code}.md"


@frozen
class RuleMeta:
    code: str
    slug: str  # short kebab-case name, e.g. "unguarded-global-write"
    title: str  # one line, shown in docs and `stitch rules`
    severity: Severity


@define
class Emitter:
    """Collects one function's findings for a rule."""

    facts: FunctionFacts | None
    path: str
    meta: RuleMeta
    found: list[Finding] = field(factory=list)

    def range(self, node: Node) -> Range:
        assert self.facts is not None
        return self.facts.range(node)

    def emit(self, where: Node | Range, message: str, *, fix: Fix | None = None,
             severity: Severity | None = None) -> None:
        rng = where if isinstance(where, Range) else self.range(where)
        self.found.append(Finding(
            path=self.path, range=rng, severity=severity or self.meta.severity, code=self.meta.code,
            message=message, source=SOURCE, doc_url=doc_url(self.meta.code), fix=fix,
        ))

    # Edits, for quick fixes.
    def insert_before(self, node: Node, text: str) -> TextEdit:
        p = self.facts.cols.start(node)
        return TextEdit(Range(p, p), text)

    def insert_after(self, node: Node, text: str) -> TextEdit:
        p = self.facts.cols.end(node)
        return TextEdit(Range(p, p), text)

    def replace(self, node: Node, text: str) -> TextEdit:
        return TextEdit(self.range(node), text)


@frozen
class FileView:
    """What file-scope rules see: every function's public facts."""

    path: str
    kernels: tuple[KernelInfo, ...]
    launches: tuple[LaunchInfo, ...]
    flows: tuple[FunctionFlow, ...] = ()
    includes: tuple[str, ...] = ()


class Rule:
    """A function-scope rule: looks at one function's facts."""

    meta: RuleMeta
    scope = "function"

    def check(self, facts: FunctionFacts, out: Emitter) -> None:  # pragma: no cover - interface
        raise NotImplementedError


class FileRule:
    """A file-scope rule: looks across functions (e.g. a kernel and its launches)."""

    meta: RuleMeta
    scope = "file"
    # The FileView fields it reads: its findings are reused while they stay the same.
    uses: tuple[str, ...] = ("kernels", "launches", "flows", "includes")

    def check_file(self, view: FileView, emit: Callable[[Range, str, Fix | None], None]) -> None:  # pragma: no cover
        raise NotImplementedError


def point_range(p: Position) -> Range:
    return Range(p, p)
