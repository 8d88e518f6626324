"""The editor on a real-shaped model file, over stdio: "Record shapes" from the quick fix beside the shape
comment, then the fuse action on a branch's else: with the same outcome as `stitch fuse`, and the hover
saying where the shapes came from."""

from __future__ import annotations

import asyncio
import os
import shutil
import re
import subprocess
import sys
from pathlib import Path

import pytest
from lsprotocol import types as lsp

from tests.fuse.test_fuse_bad_input import _actions, _open
from tests.lsp.harness import pull_capabilities, running_server, wait_until

REPO = Path(__file__).resolve().parents[2]
FIXTURE = REPO / "tests" / "fixtures" / "model_files"
MODEL = "pkg/model.py"


def _line(text: str, needle: str) -> int:
    return next(i for i, l in enumerate(text.splitlines()) if needle in l)


@pytest.mark.timeout(600)
async def test_record_from_the_quick_fix_then_the_action_matches_the_cli(tmp_path):
    root = tmp_path / "ws"
    shutil.copytree(FIXTURE, root)
    path = root / MODEL
    text = path.read_text()
    start, end = _line(text, "w = scaled(q @ k"), _line(text, "y = self.drop(w) @ v")
    async with running_server(root, capabilities=pull_capabilities(), initialization_options={"trusted": True},
                              settings={"recordCommand": f"{sys.executable} run.py"}) as client:
        uri = await _open(client, path, text)
        for _ in range(100):  # the settings arrive after initialize (workspace/configuration)
            actions = await _actions(client, uri, start, end)
            record = next((a for a in actions if a.title.startswith("Stitch: Record shapes with")), None)
            if record is not None:
                break
            await asyncio.sleep(0.1)
        titles = [a.title for a in actions]
        assert record is not None and record.disabled is None, titles
        assert any(t.startswith("Stitch: add a shape comment") for t in titles), titles
        fuse = next(a for a in actions if a.title.startswith("Stitch: fuse"))
        assert fuse.disabled is not None and "no recording" in fuse.disabled.reason

        await client.workspace_execute_command_async(lsp.ExecuteCommandParams(
            command=record.command.command, arguments=record.command.arguments))
        await wait_until(lambda: any("recorded" in m.message for m in client.messages), 240, "the recording")
        assert (root / ".stitch" / "recordings" / "pkg" / "model.py" / "Mixer.forward.json").is_file()

        hover = await client.text_document_hover_async(lsp.HoverParams(
            text_document=lsp.TextDocumentIdentifier(uri=uri), position=lsp.Position(start, 12)))
        card = hover.contents.value if hasattr(hover.contents, "value") else str(hover.contents)
        assert "recorded (.stitch/recordings/pkg/model.py/Mixer.forward.json" in card and "[2, 4, 16, 16]" in card

        fuse = next(a for a in await _actions(client, uri, start, end) if a.title.startswith("Stitch: fuse"))
        assert fuse.disabled is None and fuse.command is not None
        reply = await client.workspace_execute_command_async(lsp.ExecuteCommandParams(
            command=fuse.command.command, arguments=fuse.command.arguments))
        assert reply["job"], reply
        said = await wait_until(lambda: next((m.message for m in client.messages if "No CUDA device" in m.message
                                              or "not offered" in m.message), None), 400, "the fuse outcome")
    cli = subprocess.run([sys.executable, "-m", "stitch_lsp.cli", "fuse", f"{MODEL}:{start + 1}-{end + 1}"],
                         capture_output=True, text=True, timeout=400, cwd=root,
                         env={**os.environ, "PYTHONPATH": str(REPO), "CUDA_VISIBLE_DEVICES": ""})
    assert "Traceback" not in cli.stdout + cli.stderr
    message = next(l for l in cli.stdout.splitlines() if "No CUDA device" in l or "not offered" in l)
    # The same outcome; the editor leaves out the folder (its buttons open the candidate).
    assert said == "Stitch: " + re.sub(r" \(kept in [^)]*\)", "", message)
    assert path.read_text() == text
