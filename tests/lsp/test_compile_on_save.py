"""Compile on save through the real server: nvcc messages at their line and column,
ptxas figures as inlay hints, and the bad cases (missing, hanging nvcc, no disk)."""

from __future__ import annotations

import os
import shutil
import sys
import textwrap
import time
from pathlib import Path

import pytest
from lsprotocol import types as lsp

from tests.lsp.harness import open_doc, pull_capabilities, pushed, running_server, save_doc, wait_until

CLEAN = textwrap.dedent(
    """\
    __global__ void scale(float* __restrict__ y, const float* __restrict__ x, float a, int n) {
        int i = blockIdx.x * blockDim.x + threadIdx.x;
        if (i < n) y[i] = a * x[i];
    }

    __global__ void tile_sum(const float* __restrict__ x, float* __restrict__ out, int n) {
        __shared__ float tile[256];
        int i = blockIdx.x * blockDim.x + threadIdx.x;
        tile[threadIdx.x] = i < n ? x[i] : 0.0f;
        __syncthreads();
        if (threadIdx.x == 0) {
            float s = 0.0f;
            for (int k = 0; k < 256; ++k) s += tile[k];
            out[blockIdx.x] = s;
        }
    }
    """
)

BROKEN = textwrap.dedent(
    """\
    __global__ void scale(float* y, int n) {
        int i = blockIdx.x * blockDim.x + threadIdx.x;
        if (i < n) y[i] = undefined_name * 2.0f;
    }
    """
)


def inlay_hints(client, uri, lines=1000):
    return client.text_document_inlay_hint_async(
        lsp.InlayHintParams(
            text_document=lsp.TextDocumentIdentifier(uri=uri),
            range=lsp.Range(start=lsp.Position(line=0, character=0), end=lsp.Position(line=lines, character=0)),
        )
    )


@pytest.mark.nvcc
async def test_compile_error_at_line_and_column(tmp_path):
    path = tmp_path / "broken.cu"
    path.write_text(BROKEN)
    async with running_server(tmp_path) as client:
        uri = open_doc(client, path)
        save_doc(client, uri)
        diags = await pushed(client, uri, lambda ds: any(d.source == "nvcc" for d in ds), timeout=120)
        nvcc = [d for d in diags if d.source == "nvcc"]
        assert len(nvcc) == 1
        d = nvcc[0]
        assert d.severity == lsp.DiagnosticSeverity.Error
        assert 'identifier "undefined_name" is undefined' in d.message
        col = BROKEN.splitlines()[2].index("undefined_name")
        assert (d.range.start.line, d.range.start.character) == (2, col)
        assert d.range.end.character == col + len("undefined_name")


@pytest.mark.nvcc
async def test_clean_kernel_gets_resource_hints(tmp_path):
    path = tmp_path / "clean.cu"
    path.write_text(CLEAN)
    async with running_server(tmp_path, settings={"arch": "sm_90"}) as client:
        uri = open_doc(client, path)
        save_doc(client, uri)

        async def got_hints():
            return [h for h in (await inlay_hints(client, uri)) or [] if "regs" in str(h.label)]

        deadline = time.monotonic() + 120
        hints = []
        while time.monotonic() < deadline and len(hints) < 2:
            hints = await got_hints()
            await __import__("asyncio").sleep(0.2)
        by_line = {h.position.line: str(h.label) for h in hints}
        assert set(by_line) == {0, 5}, by_line
        assert "0 B smem" in by_line[0] and "0 spill" in by_line[0]
        assert "1.0 KB smem" in by_line[5]  # 256 floats of static shared memory
        assert all(d.source != "nvcc" or d.severity != lsp.DiagnosticSeverity.Error for d in client.diagnostics.get(uri, []))


@pytest.mark.nvcc
async def test_pull_client_gets_compile_diagnostics(tmp_path):
    path = tmp_path / "broken.cu"
    path.write_text(BROKEN)
    async with running_server(tmp_path, capabilities=pull_capabilities()) as client:
        uri = open_doc(client, path)
        save_doc(client, uri)
        await wait_until(lambda: client.diagnostic_refresh_count > 0, 120, "a diagnostic refresh")

        async def pull():
            report = await client.text_document_diagnostic_async(
                lsp.DocumentDiagnosticParams(text_document=lsp.TextDocumentIdentifier(uri=uri))
            )
            return report.items

        items = []
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not any(d.source == "nvcc" for d in items):
            items = await pull()
        assert any(d.source == "nvcc" and d.range.start.line == 2 for d in items)
        assert uri not in client.diagnostics  # nothing pushed to a pull client


async def test_missing_nvcc_one_message(tmp_path):
    path = tmp_path / "clean.cu"
    path.write_text(CLEAN)
    # The user's own setting (user scope): an untrusted workspace could not choose the compiler.
    user = {"userSettings": {"nvccPath": str(tmp_path / "no" / "nvcc")}}
    async with running_server(tmp_path, initialization_options=user) as client:
        uri = open_doc(client, path)
        for _ in range(3):
            save_doc(client, uri)
        await wait_until(lambda: client.messages, 30, "a message")
        await __import__("asyncio").sleep(1.0)
        about_nvcc = [m for m in client.messages if "nvcc" in m.message]
        assert len(about_nvcc) == 1
        assert "stitch.nvccPath" in about_nvcc[0].message
        assert not [d for d in client.diagnostics.get(uri, []) if d.source == "nvcc"]


def _children_of(pid: int) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[1]) == pid:
            out.append(int(entry))
    return out


async def test_hanging_nvcc_is_killed(tmp_path):
    fake = tmp_path / "fake-nvcc"
    pids = tmp_path / "pids"
    # A compiler that hangs, with a child of its own that hangs too; both note their pids.
    fake.write_text(f"#!/bin/sh\necho $$ >> {pids}\nsleep 300 &\necho $! >> {pids}\nsleep 300\n")
    fake.chmod(0o755)
    path = tmp_path / "clean.cu"
    path.write_text(CLEAN)
    settings = {"compileTimeoutS": 1.5, "arch": "sm_90"}
    user = {"userSettings": {"nvccPath": str(fake)}}
    async with running_server(tmp_path, settings=settings, initialization_options=user) as client:
        uri = open_doc(client, path)
        save_doc(client, uri)
        await wait_until(lambda: pids.exists() and len(pids.read_text().split()) == 2, 30, "the fake nvcc to start")
        await wait_until(lambda: any("did not finish" in m.message for m in client.messages), 30, "the timeout")
        server_pid = client._server.pid
        await wait_until(lambda: not _children_of(server_pid), 10, "no children left")
        started = [int(p) for p in pids.read_text().split()]
        await wait_until(lambda: not any(_alive(p) for p in started), 10, "the fake nvcc and its child to die")
        assert "compileTimeoutS" in next(m.message for m in client.messages if "did not finish" in m.message)


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


@pytest.mark.nvcc
async def test_no_space_for_temp_files(tmp_path):
    path = tmp_path / "clean.cu"
    path.write_text(CLEAN)
    # The real server, with a temp directory that is full.
    launcher = (
        "import errno, sys, tempfile\n"
        "def full(*a, **k):\n"
        "    raise OSError(errno.ENOSPC, 'No space left on device')\n"
        "tempfile.mkdtemp = full\n"
        "from stitch_lsp.lsp.main import main\n"
        "sys.exit(main())\n"
    )
    async with running_server(tmp_path, command=[sys.executable, "-c", launcher]) as client:
        uri = open_doc(client, path)
        save_doc(client, uri)
        msg = await wait_until(lambda: [m for m in client.messages if "space" in m.message], 30, "a disk message")
        assert "no space left for temporary files" in msg[0].message
        hover = await client.text_document_hover_async(
            lsp.HoverParams(text_document=lsp.TextDocumentIdentifier(uri=uri), position=lsp.Position(line=0, character=17))
        )
        assert hover is None or hover.contents  # still answering
