"""The server starts, answers serverInfo, never imports torch, and survives bad input."""

from __future__ import annotations

import subprocess
import sys

from lsprotocol import types as lsp

from tests.lsp.harness import REPO, open_doc, running_server, server_env, server_info


def test_version_flag():
    out = subprocess.run(
        [sys.executable, "-m", "stitch_lsp", "--version"], capture_output=True, text=True, env=server_env(), timeout=60
    )
    assert out.returncode == 0
    assert out.stdout.startswith("stitch-lsp ")


async def test_server_info_and_no_torch(tmp_path):
    (tmp_path / "model.py").write_text("import torch\n\nx = torch.randn(4)\ny = torch.relu(x)\n")
    (tmp_path / "k.cu").write_text("__global__ void k(float* y) { y[threadIdx.x] = 1.0f; }\n")
    async with running_server(tmp_path) as client:
        py = open_doc(client, tmp_path / "model.py", language="python")
        cu = open_doc(client, tmp_path / "k.cu")
        # Exercise what the editor asks for on both kinds of file before looking.
        for uri, line in ((py, 3), (cu, 0)):
            doc = lsp.TextDocumentIdentifier(uri=uri)
            whole_line = lsp.Range(start=lsp.Position(line=line, character=0), end=lsp.Position(line=line, character=20))
            await client.text_document_hover_async(lsp.HoverParams(text_document=doc, position=lsp.Position(line=line, character=5)))
            await client.text_document_code_action_async(
                lsp.CodeActionParams(text_document=doc, range=whole_line, context=lsp.CodeActionContext(diagnostics=[]))
            )
            await client.text_document_inlay_hint_async(lsp.InlayHintParams(text_document=doc, range=whole_line))
            client.text_document_did_save(lsp.DidSaveTextDocumentParams(text_document=doc))
        info = await server_info(client)
        assert info["torchLoaded"] is False
        assert info["trusted"] is False
        assert info["pid"] > 0
        assert "static_rules" in info["features"]
