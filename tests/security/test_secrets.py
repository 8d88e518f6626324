"""A canary API key through every path that could touch it: it is found nowhere on disk or in output.

The server starts with ``ANTHROPIC_API_KEY`` set to the canary (as a terminal user
would have it), logs at DEBUG to a file, and fuses a selection with the LLM Coder
against the local fake of the Messages API: a rate-limit error and a server error
first (retried), then a candidate whose import writes its own environment to a
file (so the worker's environment is known), verified by the real Verifier's
worker on the CPU. Then a second server meets an API that rejects the key. Then the
CLI runs the same fuse. Everything written — the workspace with its ``.stitch/``
caches and task folders, the server's log, its stderr, the worker logs, a private
TMPDIR and HOME, every message and diagnostic the client got, the CLI's output —
is searched for the canary and for pieces of it.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from lsprotocol import types as lsp

from tests.fuse.test_fuse_lsp_e2e import FIXTURE, _actions, _line, _open
from tests.llm.candidates import MODULE, reply
from tests.llm.fake_messages_api import ApiError, FakeMessagesAPI, Reply
from tests.lsp.harness import running_server, server_env

CANARY = "sk-ant-api03-CANARY7f3c9e1d-STITCH-0a1b2c3d4e5f"
PIECES = [CANARY, CANARY[7:], CANARY[14:30], CANARY[-16:]]


def found_in(text: str) -> int:
    return sum(text.count(piece) for piece in PIECES)


def scan_files(*roots: Path) -> tuple[int, int, list[str]]:
    """(files read, canary hits, where)."""
    files = hits = 0
    where = []
    for root in roots:
        for path in root.rglob("*"):
            if path.is_file() and not path.is_symlink():
                try:
                    data = path.read_bytes()
                except OSError:
                    continue
                files += 1
                n = sum(data.count(p.encode()) for p in PIECES)
                if n:
                    hits += n
                    where.append(str(path))
    return files, hits, where


def private_dirs(tmp_path: Path) -> dict[str, str]:
    for name in ("tmp", "home"):
        (tmp_path / name).mkdir(exist_ok=True)
    return {"TMPDIR": str(tmp_path / "tmp"), "HOME": str(tmp_path / "home"), "XDG_CACHE_HOME": str(tmp_path / "home")}


async def fuse_with_claude(client, src: Path) -> None:
    text = src.read_text()
    start, end = _line(text, "h = self.norm(x + residual)"), _line(text, "h = h * self.scale + self.shift")
    uri = await _open(client, src)
    claude = []
    for _ in range(100):
        claude = [a for a in await _actions(client, uri, start, end) if a.title.endswith("with Claude")]
        if claude:
            break
        await asyncio.sleep(0.1)
    assert claude, "the key from the environment should offer the LLM Coder"
    answer = await client.workspace_execute_command_async(lsp.ExecuteCommandParams(
        command=claude[0].command.command, arguments=claude[0].command.arguments))
    assert answer["job"], answer


def said(client) -> str:
    parts = [m.message for m in client.messages] + [m.message for m in client.log_messages]
    parts += [repr(d) for ds in client.diagnostics.values() for d in ds]
    return "\n".join(parts)


@pytest.mark.timeout(600)
async def test_the_api_key_is_found_nowhere(tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    src = ws / "block.py"
    shutil.copy(FIXTURE, src)
    env_dump = tmp_path / "worker-env.json"
    # The candidate the fake model returns records the environment its worker gave it.
    spy = f"import json as _j, os as _o\n_j.dump(dict(_o.environ), open({str(env_dump)!r}, 'w'))\n" + MODULE
    log_file = tmp_path / "server.log"
    command = [sys.executable, "-m", "stitch_lsp", "--log-file", str(log_file), "--log-level", "DEBUG"]
    outputs: list[str] = []
    with FakeMessagesAPI([ApiError(429), ApiError(529), Reply(reply(module=spy))], api_key=CANARY) as api:
        env = {"ANTHROPIC_API_KEY": CANARY, "ANTHROPIC_BASE_URL": api.base_url,
               "STITCH_TEST_VERIFIER": "tests.faults.cpu_verifier:CpuVerifier", **private_dirs(tmp_path)}
        async with running_server(ws, command=command, env=env, settings={"rounds": 1},
                                  initialization_options={"trusted": True}) as client:
            await fuse_with_claude(client, src)
            loop = asyncio.get_running_loop()
            deadline = loop.time() + 400
            while loop.time() < deadline and not (env_dump.exists() and any(
                    "Stitch" in m.message and ("fuse" in m.message.lower() or "kernel" in m.message.lower())
                    for m in client.messages)):
                await asyncio.sleep(0.5)
            assert env_dump.exists(), "the candidate never ran in a worker: " + said(client)[-2000:]
            outputs.append(said(client))
        assert len(api.requests) >= 3  # two errors retried, then the answer (and refinement rounds)
        assert all(r.headers["authorization"] == f"Bearer {CANARY}" or r.headers.get("x-api-key") == CANARY
                   for r in api.requests)
        assert all(CANARY.encode() not in r.raw_body for r in api.requests)
    worker_env = json.loads(env_dump.read_text())
    assert "ANTHROPIC_API_KEY" not in worker_env and found_in(json.dumps(worker_env)) == 0

    # An API that refuses the key: the error the user sees does not echo it.
    with FakeMessagesAPI([Reply("unused")], api_key="sk-ant-some-other-key") as refusing:
        env = {"ANTHROPIC_API_KEY": CANARY, "ANTHROPIC_BASE_URL": refusing.base_url, **private_dirs(tmp_path)}
        second = [sys.executable, "-m", "stitch_lsp", "--log-file", str(tmp_path / "server2.log"), "--log-level", "DEBUG"]
        async with running_server(ws, command=second, env=env,
                                  initialization_options={"trusted": True}) as client:
            await fuse_with_claude(client, src)
            loop = asyncio.get_running_loop()
            deadline = loop.time() + 120
            while loop.time() < deadline and not any("key" in m.message.lower() for m in client.messages):
                await asyncio.sleep(0.3)
            assert any("key" in m.message.lower() for m in client.messages), said(client)[-2000:]
            outputs.append(said(client))

    # The command line, same key, same fake API.
    with FakeMessagesAPI([ApiError(500), Reply(reply())], api_key=CANARY) as api:
        text = src.read_text()
        target = f"{src}:{_line(text, 'h = self.norm(x + residual)') + 1}-{_line(text, 'h = h * self.scale + self.shift') + 1}"
        cli = subprocess.run(
            # --no-verify: the Verifier's part was covered above; here the CLI's own output and files.
            [sys.executable, "-m", "stitch_lsp.cli", "fuse", target, "--coder", "llm", "--workspace", str(ws),
             "--no-verify"],
            capture_output=True, text=True, timeout=300, cwd=ws,
            env=server_env({"ANTHROPIC_API_KEY": CANARY, "ANTHROPIC_BASE_URL": api.base_url,
                            **private_dirs(tmp_path)}),
        )
        outputs += [cli.stdout, cli.stderr]
        assert api.requests, cli.stderr[-2000:]

    files, hits, where = scan_files(tmp_path)
    in_output = sum(found_in(o) for o in outputs)
    print(f"\ncanary: {files} files and {sum(len(o) for o in outputs)} characters of output searched; "
          f"found {hits + in_output} times")
    # What was searched held what it should: both servers' debug logs, the worker logs, the task
    # folders and the verdict cache.
    assert log_file.stat().st_size > 10_000 and (tmp_path / "server2.log").stat().st_size > 1_000
    assert list((ws / ".stitch" / "work" / "worker-logs").iterdir()) and list((ws / ".stitch" / "tasks").iterdir())
    assert list((ws / ".stitch" / "work" / "verdicts").iterdir())
    assert hits == 0, where
    assert in_output == 0
