"""The real server over stdio: the Anthropic key arrives, is used, and is never shown or passed on."""

from __future__ import annotations

import asyncio
import sys

from tests.lsp.harness import plain, running_server

ENV_KEY = "sk-ant-api03-ENVCANARY-5f3a9e"
CLIENT_KEY = "sk-ant-api03-CLIENTCANARY-77c1d0"


async def llm_status(client) -> dict:
    return plain(await client.protocol.send_request_async("stitch/llmStatus", {}))


async def test_key_from_environment_and_client_stays_in_memory(tmp_path):
    log_file = tmp_path / "server.log"
    command = [sys.executable, "-m", "stitch_lsp", "--log-file", str(log_file), "--log-level", "DEBUG"]
    async with running_server(tmp_path, env={"ANTHROPIC_API_KEY": ENV_KEY}, command=command) as client:
        status = await llm_status(client)
        assert status["configured"] is True and status["keySource"] == "environment"
        assert status["keyInChildEnvironment"] is False  # moved out of os.environ at start

        client.protocol.notify("stitch/setApiKey", {"apiKey": CLIENT_KEY})
        for _ in range(50):
            status = await llm_status(client)
            if status["keySource"] == "client":
                break
            await asyncio.sleep(0.05)
        assert status["keySource"] == "client"

        client.protocol.notify("stitch/setApiKey", {"apiKey": None})
        for _ in range(50):
            status = await llm_status(client)
            if status["keySource"] == "environment":
                break
            await asyncio.sleep(0.05)
        assert status["keySource"] == "environment"
        shown = [m.message for m in client.log_messages] + [m.message for m in client.messages]
        assert any("set from the editor's secret storage" in m for m in shown)

    written = log_file.read_text()
    everything = written + "\n".join(shown) + repr(status)
    for key in (ENV_KEY, CLIENT_KEY):
        assert key not in everything
        assert key[10:] not in everything  # not even partly


async def test_no_key_reports_not_configured(tmp_path):
    async with running_server(tmp_path, env={"ANTHROPIC_API_KEY": ""}) as client:
        status = await llm_status(client)
        assert status["configured"] is False and status["keySource"] is None
