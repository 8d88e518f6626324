"""The "while a GPU job runs" condition of ``bench/lsp_latency.py``.

A paired kernel is saved in a trusted workspace, so a verification job runs in
the server for the whole measurement: its progress streams to the client and its
worker child keeps a CPU core busy. On a machine without a GPU the worker is the
test stand-in (``tests/jobs/stand_in_verifier.py``: a child process spinning a
core, progress ten times a second); ``--real-gpu`` uses the real Verifier (the job
is re-run whenever it finishes, so one is always in flight).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import textwrap
import time
from pathlib import Path
from typing import Any, AsyncIterator

from lsprotocol import types as lsp

STAND_IN = "tests.jobs.stand_in_verifier:StandInVerifier"

REFERENCE = textwrap.dedent(
    """\
    import torch
    import torch.nn as nn


    class Model(nn.Module):
        def forward(self, x):
            return torch.relu(x) * 2.0


    def get_inputs():
        return [torch.randn(8192, 8192)]


    def get_init_inputs():
        return []
    """
)

KERNEL = textwrap.dedent(
    """\
    // stitch: reference=ref/relu_ref.py
    __global__ void relu_scale(const float* __restrict__ x, float* __restrict__ out, long n) {
        long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
        if (i < n) {
            float v = x[i];
            out[i] = (v > 0.0f ? v : (v != v ? v : 0.0f)) * 2.0f;
        }
    }
    """
)


def stand_in_env(root: Path) -> dict[str, str]:
    """Environment for the server process: the CPU stand-in worker, alive for an hour."""
    return {
        "STITCH_TEST_VERIFIER": STAND_IN,
        "STAND_IN_SECONDS": "3600",
        "STAND_IN_BUSY": "1",
        "STAND_IN_LOG": str(root / "stand_in.jsonl"),
    }


def _runs(root: Path) -> list[dict[str, Any]]:
    try:
        text = (root / "stand_in.jsonl").read_text()
    except OSError:
        return []
    return [json.loads(line) for line in text.splitlines() if line.strip()]


@contextlib.asynccontextmanager
async def gpu_job(bench: Any) -> AsyncIterator[None]:
    """A verification job runs in the server while the scenarios are measured."""
    root: Path = bench.root
    (root / "ref").mkdir(exist_ok=True)
    (root / "ref" / "relu_ref.py").write_text(REFERENCE)
    path = root / "relu_scale.cu"
    path.write_text(KERNEL)
    uri = path.as_uri()
    client = bench.client
    real = os.environ.get("STITCH_TEST_VERIFIER") is None
    statuses: list[Any] = []
    client.feature("stitch/status")(lambda params: statuses.append(params))
    client.protocol.notify("stitch/setTrusted", {"trusted": True})
    client.text_document_did_open(
        lsp.DidOpenTextDocumentParams(text_document=lsp.TextDocumentItem(uri=uri, language_id="cuda-cpp", version=1, text=KERNEL))
    )
    verify = lsp.ExecuteCommandParams(command="stitch.verifyKernel", arguments=[uri, {"line": 1, "character": 20}])

    async def keep_one_running() -> None:
        version = 1
        while True:
            if version > 1:
                # A new revision of the file, so the next run is a new question (not a cache hit).
                client.text_document_did_change(lsp.DidChangeTextDocumentParams(
                    text_document=lsp.VersionedTextDocumentIdentifier(uri=uri, version=version),
                    content_changes=[lsp.TextDocumentContentChangePartial(
                        range=lsp.Range(start=lsp.Position(line=0, character=0), end=lsp.Position(line=0, character=0)),
                        text=f"// run {version}\n")],
                ))
                verify.arguments = [uri, {"line": version, "character": 20}]
            version += 1
            answer = await client.workspace_execute_command_async(verify)
            if not _get(answer, "ok"):
                raise RuntimeError(f"stitch.verifyKernel refused: {_get(answer, 'message')}")
            while True:
                await asyncio.sleep(0.5)
                if statuses and _get(statuses[-1], "running") == 0 and _get(statuses[-1], "queued") == 0:
                    break

    keeper = asyncio.ensure_future(keep_one_running())
    try:
        if real:
            for _ in range(600):
                if any(_get(s, "running") for s in statuses):
                    break
                await asyncio.sleep(0.1)
        else:
            for _ in range(600):
                if any(r["event"] == "start" for r in _runs(root)):
                    break
                await asyncio.sleep(0.1)
            else:
                raise RuntimeError("the stand-in job never started")
        before = bench.progress_notifications
        started = time.perf_counter()
        yield
        seconds = time.perf_counter() - started
        worker = "the real Verifier" if real else "its worker a CPU stand-in: a child process spinning one core"
        bench.notes.append(
            f"gpu-job: a verification job ran throughout ({worker}); {bench.progress_notifications - before} "
            f"$/progress notifications reached the client during the {seconds:.1f} s measured"
        )
    finally:
        keeper.cancel()
        with contextlib.suppress(BaseException):
            await keeper
        await client.workspace_execute_command_async(lsp.ExecuteCommandParams(command="stitch.cancelAll", arguments=[]))
        if not real:
            for _ in range(100):
                if any(r["event"] == "killed" for r in _runs(root)):
                    break
                await asyncio.sleep(0.1)


def _get(obj: Any, name: str) -> Any:
    if isinstance(obj, dict):
        return obj.get(name)
    return getattr(obj, name, None)
