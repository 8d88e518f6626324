"""The server with the capability sets of editors other than VS Code (pytest-lsp's
recorded Neovim, Emacs/eglot and an old VS Code): every feature degrades cleanly.

- A client without pull diagnostics gets them pushed; one with pull gets them by pull.
- A client without refresh support is never sent ``workspace/diagnostic/refresh`` or
  ``workspace/inlayHint/refresh``, and still sees results that arrive later (nvcc on
  save) -- pushed, or in its next pull.
- A client without inlay hints never asks for them, and nothing fails; one with them
  gets hints without error.
- A client without ``workspace/configuration`` (Neovim 0.7) still gets its settings
  from initializationOptions and didChangeConfiguration.
- Positions follow the negotiated encoding (Emacs offers UTF-32 first, Neovim 0.11
  UTF-8): a diagnostic after a non-ASCII character lands on the right column.
- Nothing the server does in any of these sessions is an error in the client's log.
"""

from __future__ import annotations

import asyncio
import sys
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, AsyncIterator

import pytest
from lsprotocol import types as lsp
from pytest_lsp import ClientServerConfig, LanguageClient, client_capabilities

from tests.lsp.harness import plain, server_env, wait_until

CLIENTS = ["neovim@v0.6.1", "neovim@v0.7.0", "neovim@v0.9.1", "neovim@v0.10.0", "neovim@v0.11.0", "emacs@v29.1", "visual-studio-code@v1.65.2"]

# STC001 on line 4 (0-based): a grid-wide index written without a bounds check. The
# comment before the write puts a 2-byte UTF-8 / 1-unit UTF-16 character ("é") and a
# 4-byte UTF-8 / 2-unit UTF-16 character ("𝛼") on the same line.
KERNEL = """#include <cuda_runtime.h>

__global__ void scale(float* out, const float* in, float s) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    /*é𝛼*/ out[i] = in[i] * s;
}
"""
WRITE_PREFIX = "    /*é𝛼*/ "  # what comes before ``out[i]`` on that line

# A compile error nvcc reports at line 2 (0-based): found only on save.
BROKEN = """#include <cuda_runtime.h>
__global__ void k(float* y) {
    y[threadIdx.x] = undefined_name;
}
"""


class Recorder:
    """What the server asked of the client beyond the basics pytest-lsp records."""

    def __init__(self) -> None:
        self.inlay_refreshes = 0
        self.registrations: list[str] = []


def _supports(caps: lsp.ClientCapabilities, path: str) -> bool:
    node: Any = caps
    for part in path.split("."):
        node = getattr(node, part, None)
        if node is None:
            return False
    return bool(node)


def _columns(text: str, encoding: str) -> int:
    if encoding == lsp.PositionEncodingKind.Utf8:
        return len(text.encode("utf-8"))
    if encoding == lsp.PositionEncodingKind.Utf32:
        return len(text)
    return len(text.encode("utf-16-le")) // 2


@asynccontextmanager
async def session(
    root: Path, spec: str, *, init_settings: dict[str, Any] | None = None
) -> AsyncIterator[tuple[LanguageClient, lsp.InitializeResult, Recorder]]:
    caps = client_capabilities(spec)
    config = ClientServerConfig(server_command=[sys.executable, "-m", "stitch_lsp"], server_env=server_env())
    client = await config.start()
    rec = Recorder()

    @client.feature(lsp.WORKSPACE_INLAY_HINT_REFRESH)
    def _inlay_refresh(params: Any) -> None:
        rec.inlay_refreshes += 1

    @client.feature(lsp.CLIENT_REGISTER_CAPABILITY)
    def _register(params: lsp.RegistrationParams) -> None:
        rec.registrations += [r.method for r in params.registrations]

    client.set_configuration({"diagnosticsDebounceMs": 20}, section="stitch")
    result = await client.initialize_session(
        lsp.InitializeParams(
            capabilities=caps,
            root_uri=root.as_uri(),
            workspace_folders=[lsp.WorkspaceFolder(uri=root.as_uri(), name=root.name)],
            initialization_options={"trusted": False, "settings": init_settings or {}},
        )
    )
    try:
        yield client, result, rec
    finally:
        try:
            await asyncio.wait_for(client.shutdown_session(), 20)
        finally:
            await client.stop()


def _open(client: LanguageClient, path: Path, text: str) -> str:
    path.write_text(text, encoding="utf-8")
    client.text_document_did_open(
        lsp.DidOpenTextDocumentParams(
            text_document=lsp.TextDocumentItem(uri=path.as_uri(), language_id="cuda", version=1, text=text)
        )
    )
    return path.as_uri()


async def _diagnostics(client: LanguageClient, caps: lsp.ClientCapabilities, uri: str, want, timeout: float = 60.0):
    """The diagnostics this client would show for ``uri``, once ``want`` holds: pushed to a
    push client, pulled (again, as an editor does on its own) by a pull client."""
    if not _supports(caps, "text_document.diagnostic"):
        return await wait_until(
            lambda: (lambda d: list(d) if d is not None and want(list(d)) else None)(client.diagnostics.get(uri)),
            timeout,
            f"pushed diagnostics for {uri}",
        )
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    items: list[lsp.Diagnostic] = []
    while loop.time() < deadline:
        report = await client.text_document_diagnostic_async(
            lsp.DocumentDiagnosticParams(text_document=lsp.TextDocumentIdentifier(uri=uri))
        )
        items = list(getattr(report, "items", None) or [])
        if want(items):
            return items
        await asyncio.sleep(0.2)
    raise AssertionError(f"no wanted diagnostics for {uri} by pull within {timeout:g} s; last: {items}")


def _no_client_errors(client: LanguageClient) -> None:
    errors = [m.message for m in client.log_messages if m.type == lsp.MessageType.Error]
    errors += [m.message for m in client.messages if m.type == lsp.MessageType.Error]
    assert errors == [], errors
    assert client.error is None, client.error


@pytest.mark.parametrize("spec", CLIENTS)
async def test_rule_diagnostics_reach_every_client(tmp_path, spec):
    caps = client_capabilities(spec)
    async with session(tmp_path, spec) as (client, result, rec):
        pull = _supports(caps, "text_document.diagnostic")
        if not pull:
            assert client.diagnostic_refresh_count == 0
        uri = _open(client, tmp_path / "scale.cu", KERNEL)
        diags = await _diagnostics(client, caps, uri, lambda ds: any(d.code == "STC001" for d in ds))
        rule = next(d for d in diags if d.code == "STC001")

        # The column is counted in the encoding the server chose from what the client offered.
        encoding = result.capabilities.position_encoding or lsp.PositionEncodingKind.Utf16
        offered = (caps.general.position_encodings if caps.general else None) or [lsp.PositionEncodingKind.Utf16]
        assert encoding in offered, f"server chose {encoding}, client offered {offered}"
        assert rule.range.start.line == 4
        assert rule.range.start.character == _columns(WRITE_PREFIX, encoding), (encoding, rule.range)

        # Refresh requests only to clients that said they handle them.
        if not _supports(caps, "workspace.diagnostics.refresh_support"):
            assert client.diagnostic_refresh_count == 0
        if not _supports(caps, "workspace.inlay_hint.refresh_support"):
            assert rec.inlay_refreshes == 0
        # Dynamic registration only where the client supports it for that method.
        if not _supports(caps, "workspace.did_change_configuration.dynamic_registration"):
            assert lsp.WORKSPACE_DID_CHANGE_CONFIGURATION not in rec.registrations
        if not _supports(caps, "text_document.diagnostic.dynamic_registration"):
            assert lsp.TEXT_DOCUMENT_DIAGNOSTIC not in rec.registrations

        # Inlay hints: asked only by clients that have them, answered without error.
        if _supports(caps, "text_document.inlay_hint"):
            hints = await client.text_document_inlay_hint_async(
                lsp.InlayHintParams(
                    text_document=lsp.TextDocumentIdentifier(uri=uri),
                    range=lsp.Range(start=lsp.Position(0, 0), end=lsp.Position(6, 0)),
                )
            )
            assert hints is None or isinstance(hints, (list, tuple))

        info = plain(await client.protocol.send_request_async("stitch/serverInfo", {}))
        assert info["torchLoaded"] is False
        _no_client_errors(client)


@pytest.mark.nvcc
@pytest.mark.parametrize("spec", ["neovim@v0.9.1", "neovim@v0.11.0", "emacs@v29.1"])
async def test_compile_results_on_save_reach_clients_without_refresh(tmp_path, spec):
    """nvcc's results arrive after the save; a client that cannot be told to re-pull
    (no refresh support) must still see them, and is never sent a refresh request."""
    caps = client_capabilities(spec)
    async with session(tmp_path, spec) as (client, _result, rec):
        uri = _open(client, tmp_path / "broken.cu", BROKEN)
        client.text_document_did_save(lsp.DidSaveTextDocumentParams(text_document=lsp.TextDocumentIdentifier(uri=uri)))
        diags = await _diagnostics(client, caps, uri, lambda ds: any(d.source == "nvcc" for d in ds), timeout=120)
        nvcc = [d for d in diags if d.source == "nvcc"]
        assert nvcc and nvcc[0].range.start.line == 2
        assert client.diagnostic_refresh_count == 0
        if not _supports(caps, "workspace.inlay_hint.refresh_support"):
            assert rec.inlay_refreshes == 0
        _no_client_errors(client)


async def test_settings_without_workspace_configuration(tmp_path):
    """Neovim 0.7 has no workspace/configuration: initializationOptions and
    didChangeConfiguration carry the settings."""
    spec = "neovim@v0.7.0"
    caps = client_capabilities(spec)
    assert not _supports(caps, "workspace.configuration")
    async with session(tmp_path, spec, init_settings={"onSave": {"rules": True}, "diagnosticsDebounceMs": 0}) as (client, _r, _rec):
        uri = _open(client, tmp_path / "scale.cu", KERNEL)
        await _diagnostics(client, caps, uri, lambda ds: any(d.code == "STC001" for d in ds))
        client.workspace_did_change_configuration(
            lsp.DidChangeConfigurationParams(
                settings={"stitch": {"compileTimeoutS": 7, "nvccPath": str(tmp_path / "no-nvcc")}}
            )
        )
        # The change took effect; its nvccPath is the workspace's choice (this client merges
        # workspace settings files into what it sends), so untrusted it is left out, said once.
        for _ in range(100):
            info = plain(await client.protocol.send_request_async("stitch/serverInfo", {}))
            if info["settings"]["compile_timeout_s"] == 7:
                break
            await asyncio.sleep(0.05)
        assert info["settings"]["compile_timeout_s"] == 7 and info["settings"]["nvcc_path"] == "nvcc"
        await wait_until(lambda: [m for m in client.messages if "nvccPath" in m.message], 30, "the ignored nvccPath")
        assert sum("nvccPath" in m.message for m in client.messages) == 1
        assert info["trusted"] is False
