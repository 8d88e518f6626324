"""The Stitch language server: shared state, event hooks and the feature list.

Protocol plumbing lives here and in the small modules beside it; everything a
user sees comes from a feature module (``stitch_lsp/lsp/features/<name>.py`` with
``register(server)``), listed in ``FEATURES``. Features talk to the editor only
through the stores (``diagnostics``, ``hints``), the provider lists
(``hover_providers``, ``code_action_providers``) and the event hooks, so one
feature's bug never reaches another's requests.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import importlib
import inspect
import logging
import os
import sys
import traceback
from pathlib import Path
from typing import Any, Awaitable, Callable

from lsprotocol import types as lsp
from pygls.lsp.server import LanguageServer
from pygls.uris import to_fs_path
from urllib.parse import unquote
from pygls.workspace import TextDocument

from stitch_lsp import __version__
from stitch_lsp.findings import Position, Range
from stitch_lsp.lsp.convert import Converter
from stitch_lsp.lsp.cuda_documents import CudaDocuments
from stitch_lsp.lsp.diagnostics import DiagnosticStore
from stitch_lsp.lsp.hints import HintStore
from stitch_lsp.lsp.plain_text import plain
from stitch_lsp.settings import Settings

log = logging.getLogger(__name__)

# Feature modules under stitch_lsp.lsp.features, registered in this order. A module
# that is missing or fails to register is logged and skipped; the rest still work.
FEATURES = [
    "lifecycle",  # initialize / shutdown, settings from every source, workspace trust
    "documents",  # document sync hooks, file watching
    "providers",  # hover / code action / inlay hint / pull diagnostic fan-out
    "static_rules",  # tree-sitter rules on open / change
    "nvcc_on_save",  # compile on save: diagnostics and resource hints
    "kernel_checks",  # paired kernels: verify / profile on save and on command; verdict hints
    "hover",  # kernel hover cards: Nsight Compute analysis, verdict, what to try next
    "job_commands",  # cancel all, show report, stitch/status
    "quick_fixes",  # code actions from the fixes findings carry
    "fuse",  # "Stitch: fuse N ops into a CUDA kernel": code action, job, versioned edit
    "record_shapes",  # "Stitch: Record shapes" (stitch.recordCommand) and the hover saying where shapes come from
    "server_info",  # stitch/serverInfo
    "llm_key",  # stitch/setApiKey (the Anthropic key, memory only), stitch/llmStatus
]

# Document kinds the server works on.
CUDA_SUFFIXES = (".cu", ".cuh")
PYTHON_SUFFIXES = (".py",)

HoverProvider = Callable[[str, Position], "str | None"]
CodeActionProvider = Callable[[str, Range, Any], list]
Hook = Callable[..., Any]

_EVENTS = ("initialized", "open", "change", "save", "close", "settings_changed", "shutdown", "files_changed", "analysis")


class StitchServer(LanguageServer):
    def __init__(self) -> None:
        super().__init__("stitch-lsp", __version__, text_document_sync_kind=lsp.TextDocumentSyncKind.Incremental)
        self.settings = Settings()
        self.root: Path | None = None
        self.trusted = False
        self.initialization_options: dict[str, Any] = {}
        self.settings_layers: Any = None  # lifecycle.SettingsLayers once registered
        self.diagnostics = DiagnosticStore(self)
        self.hints = HintStore(self)
        self.cuda = CudaDocuments(self)  # cached CudaAnalysis per open document version
        self.hover_providers: list[HoverProvider] = []
        self.code_action_providers: list[CodeActionProvider] = []
        self.loop: asyncio.AbstractEventLoop | None = None
        self._ready: asyncio.Event | None = None  # set once the client's settings are loaded
        self._hooks: dict[str, list[Hook]] = {name: [] for name in _EVENTS}
        self._shown_once: set[str] = set()
        self._tasks: set[asyncio.Task] = set()
        self._lines_cache: tuple[tuple[str, int | None], list[str]] | None = None
        # Short CPU-bound work (parsing, rules) and blocking waits (compilers) kept apart
        # so a long compile never delays diagnostics.
        self.analysis_pool = concurrent.futures.ThreadPoolExecutor(2, thread_name_prefix="stitch-analysis")
        self.process_pool = concurrent.futures.ThreadPoolExecutor(4, thread_name_prefix="stitch-process")
        self.registered_features: list[str] = []

    # -- event hooks ---------------------------------------------------------------------
    def on_initialized(self, cb: Hook) -> Hook:
        """``cb()`` once the client is initialised and settings are loaded."""
        return self._add_hook("initialized", cb)

    def on_open(self, cb: Hook) -> Hook:
        """``cb(uri)`` after a document opened (sync or async)."""
        return self._add_hook("open", cb)

    def on_change(self, cb: Hook) -> Hook:
        """``cb(uri)`` after a document's text changed (the new text is in the workspace)."""
        return self._add_hook("change", cb)

    def on_save(self, cb: Hook) -> Hook:
        """``cb(uri)`` after a document was saved (the saved text is the workspace copy)."""
        return self._add_hook("save", cb)

    def on_close(self, cb: Hook) -> Hook:
        """``cb(uri)`` after a document closed."""
        return self._add_hook("close", cb)

    def on_settings_changed(self, cb: Hook) -> Hook:
        """``cb(settings)`` when the merged settings (or trust) changed."""
        return self._add_hook("settings_changed", cb)

    def on_shutdown(self, cb: Hook) -> Hook:
        """``cb()`` on shutdown: kill what you started."""
        return self._add_hook("shutdown", cb)

    def on_files_changed(self, cb: Hook) -> Hook:
        """``cb(list[lsp.FileEvent])`` when watched files changed on disk."""
        return self._add_hook("files_changed", cb)

    def on_analysis(self, cb: Hook) -> Hook:
        """``cb(uri, analysis)`` when a fresh CudaAnalysis of an open ``.cu`` / ``.cuh`` is ready."""
        return self._add_hook("analysis", cb)

    def _add_hook(self, event: str, cb: Hook) -> Hook:
        self._hooks[event].append(cb)
        return cb

    def emit(self, event: str, *args: Any) -> None:
        """Call every hook for ``event``; one that raises is logged and the others still run."""
        for cb in list(self._hooks[event]):
            try:
                result = cb(*args)
                if inspect.isawaitable(result):
                    self.spawn(result, name=f"{event}:{getattr(cb, '__qualname__', cb)}")
            except Exception:
                log.exception("%s hook %r failed", event, cb)

    # -- tasks and threads ---------------------------------------------------------------
    def spawn(self, coro: Awaitable[Any], name: str = "") -> asyncio.Task:
        """Run ``coro`` on the server's loop; its exceptions are logged, never lost."""
        task = asyncio.ensure_future(coro, loop=self.loop)
        self._tasks.add(task)

        def done(t: asyncio.Task) -> None:
            self._tasks.discard(t)
            if not t.cancelled() and t.exception() is not None:
                exc = t.exception()
                log.error("task %s failed: %s", name, "".join(traceback.format_exception(exc)))

        task.add_done_callback(done)
        return task

    def call_soon(self, fn: Callable[[], Any], delay: float = 0.0) -> None:
        """Run ``fn`` on the loop thread (safe to call from any thread)."""
        loop = self.loop
        if loop is None:
            fn()
            return
        if delay:
            loop.call_soon_threadsafe(loop.call_later, delay, fn)
        else:
            loop.call_soon_threadsafe(fn)

    def mark_ready(self) -> None:
        self._ready_event().set()

    def _ready_event(self) -> asyncio.Event:
        if self._ready is None:
            self._ready = asyncio.Event()
        return self._ready

    async def wait_ready(self, timeout: float = 10.0) -> None:
        """Wait until settings from the client are in (work started at open time reads them)."""
        event = self._ready_event()
        if event.is_set():
            return
        try:
            await asyncio.wait_for(event.wait(), timeout)
        except asyncio.TimeoutError:
            log.warning("settings not loaded after %g s; going on with what we have", timeout)

    def off_loop(self) -> bool:
        """True when called from a thread other than the one running the server's loop."""
        if self.loop is None:
            return False
        try:
            return asyncio.get_running_loop() is not self.loop
        except RuntimeError:
            return True

    async def run_in_thread(self, fn: Callable[..., Any], *args: Any, pool: str = "analysis") -> Any:
        executor = self.analysis_pool if pool == "analysis" else self.process_pool
        return await asyncio.get_running_loop().run_in_executor(executor, fn, *args)

    # -- documents -----------------------------------------------------------------------
    def document(self, uri: str) -> TextDocument | None:
        """The open document for ``uri`` (None when it is not open)."""
        try:
            docs = self.workspace.text_documents
        except RuntimeError:  # not initialised yet
            return None
        return docs.get(unquote(uri))  # pygls keys documents by the unquoted URI

    def converter(self, uri: str) -> Converter:
        """Position conversion for ``uri``'s current text in the negotiated encoding."""
        doc = self.document(uri)
        try:
            codec = self.workspace.position_codec
        except RuntimeError:
            codec = None
        if codec is None or doc is None:
            return Converter(None)
        return Converter(self.lines_of(doc), codec)

    def lines_of(self, doc: TextDocument) -> list[str]:
        """``doc.lines``, split once per version (pygls splits the whole text on every access)."""
        key = (doc.uri, doc.version)
        cached = self._lines_cache
        if cached is not None and cached[0] == key and doc.version is not None:
            return cached[1]
        lines = doc.lines
        self._lines_cache = (key, lines)
        return lines

    @staticmethod
    def path_of(uri: str) -> str:
        return to_fs_path(uri) or uri

    @staticmethod
    def is_cuda(uri: str) -> bool:
        return uri.lower().endswith(CUDA_SUFFIXES)

    @staticmethod
    def is_python(uri: str) -> bool:
        return uri.lower().endswith(PYTHON_SUFFIXES)

    # -- client capabilities ----------------------------------------------------------------
    def client_supports(self, dotted: str) -> bool:
        """True when the client capability at ``dotted`` (snake_case path) is set and truthy."""
        try:
            node: Any = self.client_capabilities
        except Exception:
            return False
        for part in dotted.split("."):
            node = getattr(node, part, None)
            if node is None:
                return False
        return bool(node)

    # -- messages ------------------------------------------------------------------------
    def show_message_once(self, key: str, message: str, type: lsp.MessageType = lsp.MessageType.Warning) -> bool:
        """Show ``message`` unless a message with ``key`` was already shown this session."""
        if key in self._shown_once:
            return False
        self._shown_once.add(key)
        self.show_message(message, type)
        return True

    def forget_message(self, key: str) -> None:
        """Let the message with ``key`` be shown again (the problem was fixed, then came back)."""
        self._shown_once.discard(key)

    def show_message(self, message: str, type: lsp.MessageType = lsp.MessageType.Info) -> None:
        message = plain(message)  # a toast shows no Markdown
        log.info("message to user: %s", message)
        self.call_soon(lambda: self.window_show_message(lsp.ShowMessageParams(type=type, message=message)))

    def log_message(self, message: str, type: lsp.MessageType = lsp.MessageType.Log) -> None:
        log.info("%s", message)
        self.call_soon(lambda: self.window_log_message(lsp.LogMessageParams(type=type, message=message)))

    def report_server_error(self, error: Exception, source: Any) -> None:
        # A failing notification handler is logged and shown once per kind of error,
        # not as a stream of popups; request errors already answer the request.
        log.error("server error (%s): %s", getattr(source, "__name__", source), error)
        from pygls.exceptions import FeatureRequestError

        if source is FeatureRequestError:
            return
        self.show_message_once(
            f"server-error:{type(error).__name__}",
            f"Stitch hit an internal error and carried on: {error}. Details are in the server log.",
            lsp.MessageType.Error,
        )

    # -- lifecycle -----------------------------------------------------------------------
    def register_features(self, names: list[str] | None = None) -> None:
        for name in names or FEATURES:
            try:
                module = importlib.import_module(f"stitch_lsp.lsp.features.{name}")
                module.register(self)
                self.registered_features.append(name)
            except Exception:
                log.exception("feature %s failed to register; the server runs without it", name)

    def _start_io_async(self, stdin: Any = None, stdout: Any = None) -> None:
        """pygls' stdio loop, with framing that survives a malformed frame (``framing.py``)."""
        import threading

        from pygls.io_ import StdoutWriter

        from stitch_lsp.lsp import framing, request_timing

        self._stop_event = threading.Event()
        read_chunk = framing.chunks_of(stdin or sys.stdin.buffer, self.thread_pool)
        self.protocol.set_writer(StdoutWriter(stdout or sys.stdout.buffer))
        timing = request_timing.from_environment()
        if timing is not None:
            self.protocol._send_data = timing.wrap_send(self.protocol._send_data)  # type: ignore[method-assign]
        try:
            asyncio.run(framing.run_async(self._stop_event, read_chunk, self.protocol, self.protocol._send_data,
                                          self.report_server_error, timing))
        except BrokenPipeError:
            log.error("the connection to the client is lost; shutting down")
        except (KeyboardInterrupt, SystemExit):
            pass
        finally:
            self.shutdown()

    def shutdown_hooks(self) -> None:
        self.emit("shutdown")
        self.analysis_pool.shutdown(wait=False, cancel_futures=True)
        self.process_pool.shutdown(wait=False, cancel_futures=True)


def create_server(features: list[str] | None = None) -> StitchServer:
    server = StitchServer()
    server.register_features(features)
    return server

