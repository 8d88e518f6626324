"""Settings from every source, workspace trust, file watching, isolation of failing
features, TCP, and positions in UTF-16 — all through the real server."""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
import textwrap
import time

import pytest
from lsprotocol import types as lsp

from stitch_lsp.lsp.server import create_server
from tests.lsp.harness import (
    open_doc, pull_capabilities, pushed, running_server, save_doc, server_env, server_info, wait_until,
)
from tests.lsp.test_rules_and_bad_input import PLANTED


async def test_trust_only_from_the_client(tmp_path):
    (tmp_path / "pyproject.toml").write_text('[tool.stitch]\ntrusted = true\narch = "sm_80"\n')
    settings = {"trusted": True, "bogusKey": 1, "extraFlags": ["-O3"]}
    async with running_server(tmp_path, settings=settings) as client:
        info = await server_info(client)
        assert info["trusted"] is False
        assert info["settings"]["arch"] == "sm_80"  # pyproject
        assert info["settings"]["extra_flags"] == ["-O3"]  # workspace/configuration
        logs = [m.message for m in client.log_messages]
        assert sum("bogusKey" in m for m in logs) == 1
        assert any("trusted" in m for m in logs)
        client.protocol.notify("stitch/setTrusted", {"trusted": True})
        await wait_until(lambda: True, 0.1)
        assert (await server_info(client))["trusted"] is True
        client.protocol.notify("stitch/setTrusted", {"trusted": False})
        assert (await server_info(client))["trusted"] is False


async def test_trust_from_initialization_options(tmp_path):
    async with running_server(tmp_path, initialization_options={"trusted": True, "settings": {"arch": "sm_86"}}) as client:
        info = await server_info(client)
        assert info["trusted"] is True and info["settings"]["arch"] == "sm_86"


async def test_did_change_configuration_reloads(tmp_path):
    async with running_server(tmp_path, settings={"arch": "sm_80"}) as client:
        assert (await server_info(client))["settings"]["arch"] == "sm_80"
        client.set_configuration({"arch": "sm_90", "includePaths": ["inc"]}, section="stitch")
        client.workspace_did_change_configuration(lsp.DidChangeConfigurationParams(settings=None))
        info = await wait_until_info(client, lambda i: i["settings"]["arch"] == "sm_90")
        assert info["settings"]["include_paths"] == ["inc"]


async def wait_until_info(client, predicate, timeout=20):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        info = await server_info(client)
        if predicate(info):
            return info
        await asyncio.sleep(0.1)
    raise AssertionError("serverInfo never matched")


LAUNCH_WITH_FAULTY_FEATURES = textwrap.dedent(
    """\
    import sys
    from stitch_lsp.lsp import server as srv

    register = srv.StitchServer.register_features

    def with_faults(self, names=None):
        register(self, names)
        def bad_hover(uri, pos):
            raise RuntimeError("hover feature bug")
        self.hover_providers.insert(0, bad_hover)
        self.hover_providers.append(lambda uri, pos: "the other hover still answers")
        self.code_action_providers.insert(0, lambda uri, rng, ctx: 1 / 0)
        self.on_change(lambda uri: 1 / 0)
        self.on_open(lambda uri: {}["missing"])

    srv.StitchServer.register_features = with_faults
    from stitch_lsp.lsp.main import main
    sys.exit(main())
    """
)


async def test_a_failing_feature_does_not_take_the_others_down(tmp_path):
    path = tmp_path / "planted.cu"
    path.write_text(PLANTED)
    async with running_server(tmp_path, command=[sys.executable, "-c", LAUNCH_WITH_FAULTY_FEATURES]) as client:
        uri = open_doc(client, path)
        await pushed(client, uri, lambda ds: any(d.code == "STC001" for d in ds))
        hover = await client.text_document_hover_async(
            lsp.HoverParams(text_document=lsp.TextDocumentIdentifier(uri=uri), position=lsp.Position(line=2, character=17))
        )
        assert "the other hover still answers" in hover.contents.value
        client.text_document_did_change(
            lsp.DidChangeTextDocumentParams(
                text_document=lsp.VersionedTextDocumentIdentifier(uri=uri, version=2),
                content_changes=[lsp.TextDocumentContentChangeWholeDocument(text=PLANTED + "\n// edited\n")],
            )
        )
        actions = await client.text_document_code_action_async(
            lsp.CodeActionParams(
                text_document=lsp.TextDocumentIdentifier(uri=uri),
                range=lsp.Range(start=lsp.Position(line=4, character=0), end=lsp.Position(line=4, character=8)),
                context=lsp.CodeActionContext(diagnostics=[]),
            )
        )
        assert isinstance(actions, (list, tuple))  # an answer, not an error
        assert (await server_info(client))["pid"] > 0


def test_a_feature_that_fails_to_register_is_skipped():
    server = create_server(["lifecycle", "documents", "providers", "no_such_feature", "server_info"])
    assert server.registered_features == ["lifecycle", "documents", "providers", "server_info"]


async def test_file_watchers_registered_and_header_change_recompiles(tmp_path):
    caps = pull_capabilities()
    caps.workspace.did_change_watched_files = lsp.DidChangeWatchedFilesClientCapabilities(dynamic_registration=True)
    header = tmp_path / "h.cuh"
    header.write_text("#pragma once\n__device__ inline float twice(float x) { return 2 * x; }\n")
    src = tmp_path / "k.cu"
    src.write_text('#include "h.cuh"\n__global__ void k(float* y) { y[threadIdx.x] = twice(y[threadIdx.x]); }\n')
    registrations: list[lsp.Registration] = []

    def record_registrations(client):
        @client.feature(lsp.CLIENT_REGISTER_CAPABILITY)
        def register(params: lsp.RegistrationParams):
            registrations.extend(params.registrations)

        @client.feature(lsp.WORKSPACE_INLAY_HINT_REFRESH)
        def refresh(params):
            return None

    async with running_server(
        tmp_path, capabilities=caps, settings={"arch": "sm_90"}, before_initialize=record_registrations
    ) as client:
        (watch,) = await wait_until(
            lambda: [r for r in registrations if r.method == lsp.WORKSPACE_DID_CHANGE_WATCHED_FILES],
            20,
            "the file watcher registration",
        )
        options = watch.register_options
        watchers = options["watchers"] if isinstance(options, dict) else options.watchers
        globs = {w["globPattern"] if isinstance(w, dict) else w.glob_pattern for w in watchers}
        assert globs == {"**/*.cu", "**/*.cuh", "**/*.py"}
        uri = open_doc(client, src)
        save_doc(client, uri)

        async def nvcc_items():
            report = await client.text_document_diagnostic_async(
                lsp.DocumentDiagnosticParams(text_document=lsp.TextDocumentIdentifier(uri=uri))
            )
            return [d for d in report.items if d.source == "nvcc"]

        async def resource_hints():
            hints = await client.text_document_inlay_hint_async(
                lsp.InlayHintParams(
                    text_document=lsp.TextDocumentIdentifier(uri=uri),
                    range=lsp.Range(start=lsp.Position(line=0, character=0), end=lsp.Position(line=5, character=0)),
                )
            )
            return [h for h in hints or [] if "regs" in str(h.label)]

        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not await resource_hints():
            await asyncio.sleep(0.2)
        assert await resource_hints(), "the first compile never finished"
        assert await nvcc_items() == []
        header.write_text("#pragma once\n__device__ inline float twice(float x) { return 2 * missing; }\n")
        client.workspace_did_change_watched_files(
            lsp.DidChangeWatchedFilesParams(changes=[lsp.FileEvent(uri=header.as_uri(), type=lsp.FileChangeType.Changed)])
        )
        deadline = time.monotonic() + 120
        items = []
        while time.monotonic() < deadline and not items:
            items = await nvcc_items()
            await asyncio.sleep(0.2)
        assert items and items[0].range.start.line == 0
        assert items[0].message.startswith("In h.cuh:2:")


@pytest.mark.nvcc
async def test_columns_in_utf16(tmp_path):
    line = '    const char* s = "😀 é"; y[0] = s[0] + bogus;'
    text = "__global__ void k(float* y) {\n" + line + "\n}\n"
    path = tmp_path / "u.cu"
    path.write_text(text)
    async with running_server(tmp_path, settings={"arch": "sm_90"}) as client:
        uri = open_doc(client, path)
        save_doc(client, uri)
        diags = await pushed(client, uri, lambda ds: any(d.source == "nvcc" for d in ds), timeout=120)
        d = next(d for d in diags if d.source == "nvcc")
        prefix = line[: line.index("bogus")]
        assert d.range.start.line == 1
        assert d.range.start.character == len(prefix.encode("utf-16-le")) // 2


def test_tcp_transport():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [sys.executable, "-m", "stitch_lsp", "--tcp", f"127.0.0.1:{port}"], env=server_env(),
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                conn = socket.create_connection(("127.0.0.1", port), timeout=5)
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        with conn:
            body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"capabilities": {}, "processId": None}})
            conn.sendall(f"Content-Length: {len(body)}\r\n\r\n{body}".encode())
            data = b""
            while b'"capabilities"' not in data:
                chunk = conn.recv(65536)
                assert chunk, "the server closed the connection"
                data += chunk
            assert b'"stitch-lsp"' in data
    finally:
        proc.kill()
        proc.wait()
