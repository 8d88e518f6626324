"""Fan-out of hover, code actions, inlay hints and pulled diagnostics.

Each request asks every registered provider (or store) and joins the answers; a
provider that raises is logged and left out, so the others still answer.

Providers are plain functions that read derived state. For a CUDA document, hover
and code actions first await the analysis of the text they were asked about
(``CudaDocuments.current``: computed off the event loop, once per text, shared with
the static-rules pass), so the loop goes on reading and answering other messages
while it runs, and the providers' ``server.cuda.get`` is up to date.
"""

from __future__ import annotations

import logging

from lsprotocol import types as lsp

from stitch_lsp.lsp.plain_text import plain
from stitch_lsp.lsp.server import StitchServer

log = logging.getLogger(__name__)

CODE_ACTION_KINDS = [
    lsp.CodeActionKind.QuickFix,
    lsp.CodeActionKind.Refactor,
    lsp.CodeActionKind.RefactorRewrite,
    lsp.CodeActionKind.RefactorExtract,
    lsp.CodeActionKind.Source,
]


def register(server: StitchServer) -> None:
    @server.feature(lsp.TEXT_DOCUMENT_HOVER)
    async def hover(ls: StitchServer, params: lsp.HoverParams) -> lsp.Hover | None:
        uri = params.text_document.uri
        await ls.cuda.current(uri)
        position = ls.converter(uri).from_position(params.position)
        parts: list[str] = []
        for provider in list(ls.hover_providers):
            try:
                answer = provider(uri, position)
            except Exception:
                log.exception("hover provider %r failed", provider)
                continue
            if answer:
                parts.append(answer)
        if not parts:
            return None
        return lsp.Hover(contents=lsp.MarkupContent(kind=lsp.MarkupKind.Markdown, value="\n\n---\n\n".join(parts)))

    @server.feature(
        lsp.TEXT_DOCUMENT_CODE_ACTION,
        lsp.CodeActionOptions(code_action_kinds=CODE_ACTION_KINDS, resolve_provider=False),
    )
    async def code_action(ls: StitchServer, params: lsp.CodeActionParams) -> list[lsp.CodeAction]:
        uri = params.text_document.uri
        await ls.cuda.current(uri)
        rng = ls.converter(uri).from_range(params.range)
        actions: list[lsp.CodeAction] = []
        only = params.context.only
        for provider in list(ls.code_action_providers):
            try:
                answer = provider(uri, rng, params.context) or []
            except Exception:
                log.exception("code action provider %r failed", provider)
                continue
            for action in answer:
                if only and action.kind and not any(action.kind == k or action.kind.startswith(f"{k}.") for k in only):
                    continue
                # A menu entry shows no Markdown.
                action.title = plain(action.title)
                if action.disabled is not None:
                    action.disabled.reason = plain(action.disabled.reason)
                actions.append(action)
        return actions

    @server.feature(lsp.TEXT_DOCUMENT_INLAY_HINT, lsp.InlayHintOptions(resolve_provider=False))
    def inlay_hint(ls: StitchServer, params: lsp.InlayHintParams) -> list[lsp.InlayHint]:
        return ls.hints.answer(params)

    @server.feature(
        lsp.TEXT_DOCUMENT_DIAGNOSTIC,
        lsp.DiagnosticOptions(identifier="stitch", inter_file_dependencies=False, workspace_diagnostics=False),
    )
    async def pull_diagnostics(ls: StitchServer, params: lsp.DocumentDiagnosticParams) -> lsp.DocumentDiagnosticReport:
        return await ls.diagnostics.pull(params)
