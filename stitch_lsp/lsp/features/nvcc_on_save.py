"""Compile on save: nvcc's errors and warnings as diagnostics, ptxas' per-kernel
registers / shared memory / spills as inlay hints on each ``__global__`` line.

nvcc runs off the event loop; a newer save of the same file cancels the older
compile (its process group is killed), as do closing the file and shutdown. The
resource hints follow their kernels as the file is edited (re-placed by name on
every fresh analysis) until the next save recompiles.
"""

from __future__ import annotations

import functools
import logging
from typing import Any

from lsprotocol import types as lsp

from stitch_lsp.cancellation import CancelToken
from stitch_lsp.findings import Finding, Position, Range, Severity
from stitch_lsp.lsp.cuda_documents import analyze_text, unfit_reason
from stitch_lsp.lsp.server import StitchServer
from stitch_lsp.settings import Settings
from stitch_lsp.verify.nvcc import NvccOutcome, compile_cuda
from stitch_lsp.verify.nvcc_check import NvccCheck, check_from_outcome, hint_tooltip

log = logging.getLogger(__name__)

SOURCE = "nvcc"
_HEADER_SUFFIXES = (".cuh", ".h", ".hpp", ".hh", ".inl", ".cu")
_COMPILE_KEYS = ("nvcc_path", "arch", "include_paths", "extra_flags", "compile_timeout_s")


def _compile_settings(settings: Settings) -> tuple:
    return tuple(repr(getattr(settings, k)) for k in _COMPILE_KEYS)


class CompileOnSave:
    def __init__(self, server: StitchServer) -> None:
        self.server = server
        self.tokens: dict[str, CancelToken] = {}
        self.last: dict[str, tuple[NvccOutcome, NvccCheck]] = {}
        self._compile_settings = _compile_settings(server.settings)

    # -- events ----------------------------------------------------------------------------
    def on_save(self, uri: str) -> None:
        server = self.server
        if not server.is_cuda(uri) or not server.settings.on_save.compile:
            return
        doc = server.document(uri)
        if doc is None:
            return
        text = doc.source
        reason = unfit_reason(text)
        if reason is not None:
            server.show_message_once(f"unfit:{uri}", f"Stitch does not compile {doc.filename}: {reason}.")
            return
        self.cancel(uri, "saved again")
        token = CancelToken()
        self.tokens[uri] = token
        server.spawn(self._compile(uri, text, doc.version, token), name=f"nvcc {uri}")

    def cancel(self, uri: str, reason: str) -> None:
        token = self.tokens.pop(uri, None)
        if token is not None:
            token.cancel(reason)

    def on_close(self, uri: str) -> None:
        self.cancel(uri, "closed")
        self.last.pop(uri, None)

    def on_shutdown(self) -> None:
        for uri in list(self.tokens):
            self.cancel(uri, "shutdown")

    def on_settings_changed(self, settings: Settings) -> None:
        if not settings.on_save.compile:
            # Compiling turned off: what an earlier compile said is no longer kept up to date.
            for uri in set(self.last) | set(self.tokens):
                self.on_close(uri)
                self.server.diagnostics.set(uri, SOURCE, [])
                self.server.hints.set(uri, SOURCE, [])
            return
        current = _compile_settings(settings)
        if current == self._compile_settings:
            return
        self._compile_settings = current
        self.server.forget_message("nvcc-missing")
        for uri in set(self.last) | set(self.tokens):
            self.on_save(uri)

    def on_files_changed(self, changes: list[lsp.FileEvent]) -> None:
        # A header changed on disk: what includes it may now compile differently.
        if any(c.uri.lower().endswith(_HEADER_SUFFIXES) for c in changes):
            changed = {c.uri for c in changes}
            for uri in list(self.last):
                if uri not in changed:
                    self.on_save(uri)

    def on_analysis(self, uri: str, analysis: Any) -> None:
        entry = self.last.get(uri)
        doc = self.server.document(uri)
        if entry is None or doc is None:
            return
        outcome, _ = entry
        check = check_from_outcome(outcome, analysis, self.server.path_of(uri), doc.source)
        self.last[uri] = (outcome, check)
        self.server.hints.set(uri, SOURCE, check.hints)

    # -- the compile -------------------------------------------------------------------------
    async def _compile(self, uri: str, text: str, version: int | None, token: CancelToken) -> None:
        server = self.server
        await server.wait_ready()
        if token.cancelled:
            return
        path = server.path_of(uri)
        run = functools.partial(compile_cuda, text, path, server.settings, root=server.root, token=token)
        try:
            outcome: NvccOutcome = await server.run_in_thread(run, pool="process")
        finally:
            if self.tokens.get(uri) is token:
                self.tokens.pop(uri, None)
        if token.cancelled or server.document(uri) is None:
            return
        if outcome.status == "missing":
            server.show_message_once("nvcc-missing", outcome.message, lsp.MessageType.Warning)
            server.diagnostics.set(uri, SOURCE, [])
            server.hints.set(uri, SOURCE, [])
            return
        if outcome.status in ("timeout", "no_space", "error"):
            server.show_message_once(f"nvcc-{outcome.status}:{uri}", outcome.message, lsp.MessageType.Warning)
            # On the file too: its compile results are missing, and this is why.
            server.diagnostics.set(uri, SOURCE, [no_compile_finding(path, text, outcome)])
            return
        if outcome.status == "cancelled":
            return
        server.forget_message(f"nvcc-timeout:{uri}")
        server.forget_message(f"nvcc-no_space:{uri}")
        hit, analysis = server.cuda.cached(uri, version)
        if not hit:
            analysis = await server.run_in_thread(analyze_text, text, path)
        check = check_from_outcome(outcome, analysis, path, text)
        self.last[uri] = (outcome, check)
        server.diagnostics.set(uri, SOURCE, check.findings)
        server.hints.set(uri, SOURCE, check.hints)

    # -- hover -------------------------------------------------------------------------------
    def hover(self, uri: str, position: Position) -> str | None:
        entry = self.last.get(uri)
        if entry is None:
            return None
        outcome, check = entry
        for placed in check.kernels:
            if placed.name_range.contains(position):
                k = placed.resources
                demangled = outcome.ptxas.demangled.get(k.mangled, k.name)
                return hint_tooltip(k, demangled, outcome.arch)
        return None


def no_compile_finding(path: str, text: str, outcome: NvccOutcome) -> Finding:
    """A warning on the first line: this save was not compiled, and why."""
    first = text.split("\n", 1)[0].rstrip("\r")
    return Finding(
        path=path,
        range=Range(Position(0, 0), Position(0, len(first))),
        severity=Severity.WARNING,
        code=f"nvcc-{outcome.status.replace('_', '-')}",
        message=outcome.message,
        source=SOURCE,
    )


def register(server: StitchServer) -> None:
    feature = CompileOnSave(server)
    server.on_save(feature.on_save)
    server.on_close(feature.on_close)
    server.on_shutdown(feature.on_shutdown)
    server.on_settings_changed(feature.on_settings_changed)
    server.on_files_changed(feature.on_files_changed)
    server.on_analysis(feature.on_analysis)
    server.hover_providers.append(feature.hover)
