"""The real server over stdio: "fuse ... with Claude" is offered only with a key, and runs the LLM loop.

The model is the fake Messages API (``ANTHROPIC_BASE_URL``); without a GPU the
Verifier answers "no CUDA device" and the loop stops after one round, so the run
shows the whole path — key from the client, the plan and the task sent, the
clear message back — without spending tokens on unverifiable rounds.
"""

from __future__ import annotations

import asyncio
import shutil
import sys

import pytest
from lsprotocol import types as lsp

from tests.fuse.test_fuse_lsp_e2e import FIXTURE, _actions, _line, _open
from tests.lsp.harness import running_server

from .candidates import reply
from .fake_messages_api import FakeMessagesAPI, Reply

CLIENT_KEY = "sk-ant-api03-LSPCLAUDECANARY-4d2e"


@pytest.mark.timeout(600)
async def test_with_claude_variant_needs_a_key_and_runs_the_loop(tmp_path):
    src = tmp_path / "block.py"
    shutil.copy(FIXTURE, src)
    text = src.read_text()
    start, end = _line(text, "h = self.norm(x + residual)"), _line(text, "h = h * self.scale + self.shift")
    log_file = tmp_path / "server.log"
    command = [sys.executable, "-m", "stitch_lsp", "--log-file", str(log_file), "--log-level", "DEBUG"]
    with FakeMessagesAPI([Reply(reply())], api_key=CLIENT_KEY) as api:
        env = {"ANTHROPIC_API_KEY": "", "ANTHROPIC_BASE_URL": api.base_url}
        async with running_server(tmp_path, command=command, env=env,
                                  initialization_options={"trusted": True}) as client:
            uri = await _open(client, src)
            titles = [a.title for a in await _actions(client, uri, start, end)]
            assert titles and not any("with Claude" in t for t in titles), titles

            client.protocol.notify("stitch/setApiKey", {"apiKey": CLIENT_KEY})
            claude = []
            for _ in range(50):
                claude = [a for a in await _actions(client, uri, start, end) if a.title.endswith("with Claude")]
                if claude:
                    break
                await asyncio.sleep(0.1)
            assert claude and claude[0].command.arguments[-1] == "llm"

            reply_ = await client.workspace_execute_command_async(lsp.ExecuteCommandParams(
                command=claude[0].command.command, arguments=claude[0].command.arguments))
            assert reply_["job"], reply_
            loop = asyncio.get_running_loop()
            deadline = loop.time() + 500
            while loop.time() < deadline and not any("No CUDA device" in m.message or "not offered" in m.message
                                                     for m in client.messages):
                await asyncio.sleep(0.5)
            messages = [m.message for m in client.messages]
            assert any("No CUDA device" in m for m in messages), messages
            # The rubric's findings are published on the generated kernel kept under .stitch/tasks/.
            for _ in range(50):
                rubric = {u: d for u, d in client.diagnostics.items()
                          if ".stitch/tasks/" in u and any(x.source == "stitch rubric" for x in d)}
                if rubric:
                    break
                await asyncio.sleep(0.1)
            assert rubric, list(client.diagnostics)
            assert any(u.endswith("kernel.cu") for u in rubric)

        (request,) = api.requests
        assert request.headers["authorization"] == f"Bearer {CLIENT_KEY}"
        sent = "\n".join(request.message_texts("user"))
        assert "# Plan (from Stitch's Planner)" in sent and "self.norm" in sent
    written = log_file.read_text() + "\n".join(messages)
    written += "".join(p.read_text(errors="replace") for p in (tmp_path / ".stitch").rglob("*") if p.is_file())
    assert CLIENT_KEY not in written
