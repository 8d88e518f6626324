"""Quick fixes: the ``Fix`` a finding carries, offered as a code action on its range."""

from __future__ import annotations

from typing import Any

from lsprotocol import types as lsp

from stitch_lsp.findings import Range
from stitch_lsp.lsp.server import StitchServer


def _overlaps(a: Range, b: Range) -> bool:
    return not (a.end < b.start or b.end < a.start)


def register(server: StitchServer) -> None:
    def provide(uri: str, rng: Range, context: Any) -> list[lsp.CodeAction]:
        findings = [f for f in server.diagnostics.get(uri) if f.fix is not None and _overlaps(f.range, rng)]
        if not findings:
            return []
        convert = server.converter(uri)
        sent = {(d.code, d.range.start.line) for d in (context.diagnostics or [])} if context else set()
        actions = []
        for finding in findings:
            diagnostic = convert.diagnostic(finding, uri)
            actions.append(
                lsp.CodeAction(
                    title=finding.fix.title,
                    kind=lsp.CodeActionKind.QuickFix,
                    diagnostics=[diagnostic],
                    is_preferred=(finding.code, diagnostic.range.start.line) in sent,
                    edit=lsp.WorkspaceEdit(changes={uri: [convert.text_edit(e) for e in finding.fix.edits]}),
                )
            )
        return actions

    server.code_action_providers.append(provide)
