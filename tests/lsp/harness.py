"""Start the real Stitch server over stdio with a pytest-lsp client, as a given editor."""

from __future__ import annotations

import asyncio
import os
import sys
import time
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, AsyncIterator, Callable

from lsprotocol import types as lsp
from pytest_lsp import ClientServerConfig, LanguageClient, client_capabilities

REPO = Path(__file__).resolve().parents[2]


def server_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["STITCH_CONFIG"] = os.devnull  # the tester's own ~/.config/stitch never reaches a test
    env.update(extra or {})
    return env


def push_capabilities() -> lsp.ClientCapabilities:
    """A client without pull diagnostics or refresh requests (an older editor)."""
    caps = client_capabilities("neovim@v0.9.1")
    if caps.text_document is not None:
        caps.text_document.diagnostic = None
    return caps


def pull_capabilities() -> lsp.ClientCapabilities:
    """A current editor: pull diagnostics, diagnostic and inlay-hint refresh, dynamic watchers."""
    caps = client_capabilities("visual-studio-code")
    caps.text_document.diagnostic = lsp.DiagnosticClientCapabilities(
        dynamic_registration=False, related_document_support=False
    )
    caps.workspace.diagnostics = lsp.DiagnosticWorkspaceClientCapabilities(refresh_support=True)
    caps.workspace.inlay_hint = lsp.InlayHintWorkspaceClientCapabilities(refresh_support=True)
    return caps


@asynccontextmanager
async def running_server(
    root: Path,
    *,
    capabilities: lsp.ClientCapabilities | None = None,
    settings: dict[str, Any] | None = None,
    initialization_options: dict[str, Any] | None = None,
    env: dict[str, str] | None = None,
    command: list[str] | None = None,
    before_initialize: Callable[[LanguageClient], None] | None = None,
) -> AsyncIterator[LanguageClient]:
    config = ClientServerConfig(
        server_command=command or [sys.executable, "-m", "stitch_lsp"],
        server_env=server_env(env),
    )
    client = await config.start()
    client.set_configuration({"diagnosticsDebounceMs": 20, **(settings or {})}, section="stitch")
    if before_initialize is not None:
        before_initialize(client)
    await client.initialize_session(
        lsp.InitializeParams(
            capabilities=capabilities or push_capabilities(),
            root_uri=root.as_uri(),
            workspace_folders=[lsp.WorkspaceFolder(uri=root.as_uri(), name=root.name)],
            initialization_options=initialization_options,
        )
    )
    try:
        yield client
    finally:
        try:
            await asyncio.wait_for(client.shutdown_session(), 20)
        finally:
            await client.stop()


def open_doc(client: LanguageClient, path: Path, text: str | None = None, language: str = "cuda-cpp") -> str:
    uri = path.as_uri()
    client.text_document_did_open(
        lsp.DidOpenTextDocumentParams(
            text_document=lsp.TextDocumentItem(
                uri=uri, language_id=language, version=1, text=path.read_text() if text is None else text
            )
        )
    )
    return uri


def save_doc(client: LanguageClient, uri: str) -> None:
    client.text_document_did_save(lsp.DidSaveTextDocumentParams(text_document=lsp.TextDocumentIdentifier(uri=uri)))


async def wait_until(predicate: Callable[[], Any], timeout: float = 30.0, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        await asyncio.sleep(0.05)
    raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")


async def pushed(client: LanguageClient, uri: str, predicate: Callable[[list[lsp.Diagnostic]], bool], timeout: float = 30.0) -> list[lsp.Diagnostic]:
    """Wait until the diagnostics pushed for ``uri`` satisfy ``predicate``."""
    return await wait_until(
        lambda: (lambda d: d if d is not None and predicate(list(d)) else None)(client.diagnostics.get(uri)),
        timeout,
        f"diagnostics for {uri}",
    ) or []


def plain(value: Any) -> Any:
    """pygls hands untyped results back as namedtuples: turn them into dicts and lists."""
    if hasattr(value, "_asdict"):
        return {k: plain(v) for k, v in value._asdict().items()}
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value


async def server_info(client: LanguageClient) -> dict[str, Any]:
    return plain(await client.protocol.send_request_async("stitch/serverInfo", {}))
