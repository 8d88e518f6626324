"""Document sync and file watching, turned into the server's event hooks.

pygls keeps the text (incremental sync); this module tells the features. Changes
on disk to ``.py`` / ``.cu`` / ``.cuh`` files in the workspace arrive through
``workspace/didChangeWatchedFiles``, registered dynamically where the client can.
"""

from __future__ import annotations

import logging

from lsprotocol import types as lsp

from stitch_lsp.lsp.server import StitchServer

log = logging.getLogger(__name__)

WATCH_GLOBS = ("**/*.cu", "**/*.cuh", "**/*.py")


def register(server: StitchServer) -> None:
    @server.feature(lsp.TEXT_DOCUMENT_DID_OPEN)
    def did_open(ls: StitchServer, params: lsp.DidOpenTextDocumentParams) -> None:
        ls.emit("open", params.text_document.uri)

    @server.feature(lsp.TEXT_DOCUMENT_DID_CHANGE)
    def did_change(ls: StitchServer, params: lsp.DidChangeTextDocumentParams) -> None:
        ls.emit("change", params.text_document.uri)

    @server.feature(lsp.TEXT_DOCUMENT_DID_SAVE, lsp.SaveOptions(include_text=False))
    def did_save(ls: StitchServer, params: lsp.DidSaveTextDocumentParams) -> None:
        ls.emit("save", params.text_document.uri)

    @server.feature(lsp.TEXT_DOCUMENT_DID_CLOSE)
    def did_close(ls: StitchServer, params: lsp.DidCloseTextDocumentParams) -> None:
        uri = params.text_document.uri
        ls.emit("close", uri)
        # A closed file's findings go with it (the editor shows open files' problems).
        ls.diagnostics.clear(uri)
        ls.hints.clear(uri)

    @server.feature(lsp.WORKSPACE_DID_CHANGE_WATCHED_FILES)
    def did_change_watched_files(ls: StitchServer, params: lsp.DidChangeWatchedFilesParams) -> None:
        if params.changes:
            ls.emit("files_changed", list(params.changes))

    @server.on_initialized
    async def watch_files() -> None:
        if not server.client_supports("workspace.did_change_watched_files.dynamic_registration"):
            return
        watchers = [lsp.FileSystemWatcher(glob_pattern=glob) for glob in WATCH_GLOBS]
        try:
            await server.client_register_capability_async(
                lsp.RegistrationParams(
                    registrations=[
                        lsp.Registration(
                            id="stitch-watched-files",
                            method=lsp.WORKSPACE_DID_CHANGE_WATCHED_FILES,
                            register_options=lsp.DidChangeWatchedFilesRegistrationOptions(watchers=watchers),
                        )
                    ]
                )
            )
        except Exception as exc:
            log.warning("could not register file watchers: %s", exc)
