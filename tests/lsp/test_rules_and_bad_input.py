"""Static rules through the real server, for push and pull clients, and bad input:
a broken parse, a binary file, text that is not UTF-8, a 100,000-line file."""

from __future__ import annotations

import asyncio
import textwrap
import time

from lsprotocol import types as lsp

from tests.lsp.harness import open_doc, pull_capabilities, pushed, running_server, save_doc, server_info

PLANTED = textwrap.dedent(
    """\
    #include <cuda_runtime.h>

    __global__ void unguarded(float* y, const float* __restrict__ x, int n) {
        int i = blockIdx.x * blockDim.x + threadIdx.x;
        y[i] = 2.0f * x[i];
    }

    __global__ void divergent_barrier(float* __restrict__ y, int n) {
        __shared__ float s[256];
        int i = blockIdx.x * blockDim.x + threadIdx.x;
        if (threadIdx.x < 128) {
            s[threadIdx.x] = 1.0f;
            __syncthreads();
        }
        __syncthreads(); if (i < n) y[i] = s[threadIdx.x % 128];
    }

    void launch(float* y, const float* x, int n) {
        unguarded<<<(n + 255) / 256, 256>>>(y, x, n);
    }
    int main() { launch(nullptr, nullptr, 1 << 20); return 0; }
    """
)
EXPECTED = {("STC001", 4), ("STC002", 12), ("STC009", 18)}

# The same kernels, half-typed: the unguarded write sits in a function that does not parse.
BROKEN = textwrap.dedent(
    """\
    __global__ void unguarded(float* y, const float* __restrict__ x, int n) {
        int i = blockIdx.x * blockDim.x + threadIdx.x
        y[i] = 2.0f * x[i];
        if (threadIdx.x < 128) { __syncthreads(); }
    """
)


def rule_codes(diags):
    return {(d.code, d.range.start.line) for d in diags if str(d.code).startswith("STC")}


async def test_planted_violations_push_client(tmp_path):
    path = tmp_path / "planted.cu"
    path.write_text(PLANTED)
    async with running_server(tmp_path) as client:
        uri = open_doc(client, path)
        diags = await pushed(client, uri, lambda ds: rule_codes(ds) >= EXPECTED)
        assert rule_codes(diags) == EXPECTED
        stc001 = next(d for d in diags if d.code == "STC001")
        assert stc001.source == "rules" or stc001.source.startswith("stitch")
        assert stc001.range.start.character == PLANTED.split("\n")[4].index("y[i]")
        assert stc001.code_description is not None and "STC001" in stc001.code_description.href

        # Fix the write; the finding goes away on the next change (no save needed).
        fixed = PLANTED.replace("    y[i] = 2.0f * x[i];", "    if (i < n) y[i] = 2.0f * x[i];")
        client.text_document_did_change(
            lsp.DidChangeTextDocumentParams(
                text_document=lsp.VersionedTextDocumentIdentifier(uri=uri, version=2),
                content_changes=[lsp.TextDocumentContentChangeWholeDocument(text=fixed)],
            )
        )
        diags = await pushed(client, uri, lambda ds: ("STC001", 4) not in rule_codes(ds))
        assert rule_codes(diags) == EXPECTED - {("STC001", 4)}


async def test_planted_violations_pull_client(tmp_path):
    path = tmp_path / "planted.cu"
    path.write_text(PLANTED)
    async with running_server(tmp_path, capabilities=pull_capabilities()) as client:
        uri = open_doc(client, path)
        report = await client.text_document_diagnostic_async(
            lsp.DocumentDiagnosticParams(text_document=lsp.TextDocumentIdentifier(uri=uri))
        )
        # The pull waits for the analysis under way: the first answer is already complete.
        assert rule_codes(report.items) == EXPECTED
        again = await client.text_document_diagnostic_async(
            lsp.DocumentDiagnosticParams(
                text_document=lsp.TextDocumentIdentifier(uri=uri), previous_result_id=report.result_id
            )
        )
        assert again.kind == "unchanged"
        assert uri not in client.diagnostics


async def test_incremental_edits_keep_lines_right(tmp_path):
    path = tmp_path / "planted.cu"
    path.write_text(PLANTED)
    async with running_server(tmp_path) as client:
        uri = open_doc(client, path)
        await pushed(client, uri, lambda ds: rule_codes(ds) >= EXPECTED)
        # Insert two comment lines at the top, incrementally.
        client.text_document_did_change(
            lsp.DidChangeTextDocumentParams(
                text_document=lsp.VersionedTextDocumentIdentifier(uri=uri, version=2),
                content_changes=[
                    lsp.TextDocumentContentChangePartial(
                        range=lsp.Range(start=lsp.Position(line=0, character=0), end=lsp.Position(line=0, character=0)),
                        text="// one\n// two\n",
                    )
                ],
            )
        )
        shifted = {(c, line + 2) for c, line in EXPECTED}
        diags = await pushed(client, uri, lambda ds: rule_codes(ds) == shifted)
        assert rule_codes(diags) == shifted


async def test_broken_file_gives_no_false_rule_findings(tmp_path):
    path = tmp_path / "broken.cu"
    path.write_text(BROKEN)
    async with running_server(tmp_path) as client:
        uri = open_doc(client, path)
        diags = await pushed(client, uri, lambda ds: any(d.code == "parse" for d in ds))
        assert rule_codes(diags) == set()
        notes = [d for d in diags if d.code == "parse"]
        assert notes and all(n.severity == lsp.DiagnosticSeverity.Hint for n in notes)
        # The kernel the rules skipped is named, with the reason.
        assert any(n.message.startswith("Static rules skipped kernel 'unguarded': ") for n in notes), \
            [n.message for n in notes]


async def _still_answers(client, uri):
    hover = await asyncio.wait_for(
        client.text_document_hover_async(
            lsp.HoverParams(text_document=lsp.TextDocumentIdentifier(uri=uri), position=lsp.Position(line=0, character=3))
        ),
        30,
    )
    hints = await asyncio.wait_for(
        client.text_document_inlay_hint_async(
            lsp.InlayHintParams(
                text_document=lsp.TextDocumentIdentifier(uri=uri),
                range=lsp.Range(start=lsp.Position(line=0, character=0), end=lsp.Position(line=50, character=0)),
            )
        ),
        30,
    )
    actions = await asyncio.wait_for(
        client.text_document_code_action_async(
            lsp.CodeActionParams(
                text_document=lsp.TextDocumentIdentifier(uri=uri),
                range=lsp.Range(start=lsp.Position(line=0, character=0), end=lsp.Position(line=0, character=1)),
                context=lsp.CodeActionContext(diagnostics=[]),
            )
        ),
        30,
    )
    info = await asyncio.wait_for(server_info(client), 30)
    return hover, hints, actions, info


async def test_binary_and_non_utf8_files(tmp_path):
    binary = "".join(chr(c) for c in range(0, 256)) * 50 + "\x00\x00\x7fELF"
    # What an editor sends for a Latin-1 file: replacement characters and escaped bytes.
    not_utf8 = (
        "// caf\udce9 \ufffd\n"
        "__global__ void k(float* y) { int i = blockIdx.x * blockDim.x + threadIdx.x; y[i] = 1.0f; }\n"
    )
    async with running_server(tmp_path) as client:
        uri_bin = open_doc(client, tmp_path / "blob.cu", text=binary)
        uri_txt = open_doc(client, tmp_path / "latin1.cu", text=not_utf8)
        save_doc(client, uri_bin)
        save_doc(client, uri_txt)
        for uri in (uri_bin, uri_txt):
            *_, info = await _still_answers(client, uri)
            assert info["pid"] > 0
        diags = await pushed(client, uri_txt, lambda ds: any(d.code == "STC001" for d in ds), timeout=60)
        assert [d.range.start.line for d in diags if d.code == "STC001"] == [1]
        assert any("binary" in m.message for m in client.messages)
        assert not client.diagnostics.get(uri_bin)


async def test_huge_file_keeps_the_server_answering(tmp_path):
    kernel = (
        "__global__ void kernel_{n}(const float* __restrict__ x, float* __restrict__ y, int n) {{\n"
        "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
        "    y[i] = x[i] * 2.0f;\n"
        "}}\n\n"
    )
    text = "".join(kernel.format(n=n) for n in range(20_000))  # 100,000 lines
    assert text.count("\n") == 100_000
    async with running_server(tmp_path) as client:
        uri = open_doc(client, tmp_path / "huge.cu", text=text)
        start = time.monotonic()
        hover, hints, actions, info = await _still_answers(client, uri)
        assert time.monotonic() - start < 30
        # The requests were answered while the first analysis was still running in its
        # thread, not after it: nothing waited on the parse of 100,000 lines.
        assert client.diagnostics.get(uri) is None
        # The first parse of 100,000 lines takes seconds (minutes on a loaded 2-core machine).
        diags = await pushed(client, uri, lambda ds: len(ds) > 0, timeout=240)
        assert {d.code for d in diags} == {"STC001"}
        assert max(d.range.start.line for d in diags) == 99_997
