"""End to end over stdio: open a model file, ask for code actions on a selection, run the fuse action.

Without a GPU the job must end with a clear "No CUDA device" message (and progress
on the way); with one, the client is offered a versioned edit labelled with the
measured speedups.
"""

from __future__ import annotations

import ast
import asyncio
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from lsprotocol import types as lsp

from tests.lsp.harness import pull_capabilities, running_server

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "fuse" / "block.py"


def _has_gpu() -> bool:
    out = subprocess.run([sys.executable, "-c", "import torch; print(torch.cuda.is_available())"],
                         capture_output=True, text=True, timeout=120)
    return out.stdout.strip().endswith("True")


def _line(text: str, needle: str) -> int:
    return next(i for i, l in enumerate(text.splitlines()) if needle in l)


async def _open(client, path: Path) -> str:
    uri = path.as_uri()
    client.text_document_did_open(lsp.DidOpenTextDocumentParams(
        text_document=lsp.TextDocumentItem(uri=uri, language_id="python", version=1, text=path.read_text())))
    return uri


async def _actions(client, uri: str, start: int, end: int) -> list[lsp.CodeAction]:
    result = await client.text_document_code_action_async(lsp.CodeActionParams(
        text_document=lsp.TextDocumentIdentifier(uri=uri),
        range=lsp.Range(lsp.Position(start, 0), lsp.Position(end + 1, 0)),
        context=lsp.CodeActionContext(diagnostics=[]),
    ))
    actions = []
    for a in result or []:
        if isinstance(a, lsp.Command) and a.command.startswith("{"):
            # lsprotocol's client-side hook reads any code action that has a command as a bare
            # Command (the nested command arrives as its repr); rebuild what the server sent.
            inner = ast.literal_eval(a.command)
            a = lsp.CodeAction(title=a.title, kind=lsp.CodeActionKind.RefactorRewrite,
                               command=lsp.Command(title=inner["title"], command=inner["command"],
                                                   arguments=inner.get("arguments")))
        if isinstance(a, lsp.CodeAction) and a.title.startswith("Stitch"):
            actions.append(a)
    return actions


@pytest.mark.timeout(600)
async def test_fuse_action_listed_then_run(tmp_path):
    src = tmp_path / "block.py"
    shutil.copy(FIXTURE, src)
    text = src.read_text()
    applied: list[lsp.ApplyWorkspaceEditParams] = []

    def before(client):
        @client.feature(lsp.WORKSPACE_APPLY_EDIT)
        def apply_edit(params: lsp.ApplyWorkspaceEditParams):
            applied.append(params)
            return lsp.ApplyWorkspaceEditResult(applied=False, failure_reason="test client")

    async with running_server(tmp_path, capabilities=pull_capabilities(),
                              initialization_options={"trusted": True}, before_initialize=before) as client:
        uri = await _open(client, src)
        start, end = _line(text, "h = self.norm(x + residual)"), _line(text, "h = h * self.scale + self.shift")
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        actions = await _actions(client, uri, start, end)
        listed_in = loop.time() - t0
        fuse = [a for a in actions if a.title.startswith("Stitch: fuse") and a.command is not None]
        assert fuse, [a.title for a in actions]
        assert fuse[0].kind == lsp.CodeActionKind.RefactorRewrite
        assert "ops into a CUDA kernel" in fuse[0].title
        assert listed_in < 2.0  # answered from analysis alone

        # A selection with Python control flow is listed as disabled, with the reason.
        bad = await _actions(client, uri, _line(text, "if out.sum() > 0"), _line(text, "out = out * 2"))
        assert bad and bad[0].disabled is not None and "control flow" in bad[0].disabled.reason

        reply = await client.workspace_execute_command_async(lsp.ExecuteCommandParams(
            command=fuse[0].command.command, arguments=fuse[0].command.arguments))
        assert reply["job"], reply
        gpu = _has_gpu()
        deadline = loop.time() + 540
        while loop.time() < deadline:
            if applied or any("Stitch" in m.message and ("CUDA" in m.message or "not offered" in m.message)
                              for m in client.messages):
                break
            await asyncio.sleep(0.5)
        messages = [m.message for m in client.messages]
        reports = [r for token_reports in client.progress_reports.values() for r in token_reports]
        stages = " ".join(getattr(r, "message", "") or "" for r in reports)
        assert "planning" in stages, stages
        if not gpu:
            assert any("No CUDA device" in m for m in messages), messages
            assert not applied
            assert list((tmp_path / ".stitch" / "tasks").glob("*/candidate.py")), "generated code kept to read"
        else:
            assert applied, messages
            edit = applied[0]
            assert " eager" in (edit.label or "") and "torch.compile" in (edit.label or "")
            changes = edit.edit.document_changes
            assert any(isinstance(c, lsp.CreateFile) for c in changes)
            versioned = [c for c in changes if isinstance(c, lsp.TextDocumentEdit) and c.text_document.uri == uri]
            assert versioned and versioned[0].text_document.version == 1
        assert src.read_text() == text  # nothing is written until the user accepts


async def test_missing_shapes_offer_a_comment_quick_fix(tmp_path):
    src = tmp_path / "block.py"
    shutil.copy(FIXTURE, src)
    text = src.read_text()
    async with running_server(tmp_path, capabilities=pull_capabilities()) as client:
        uri = await _open(client, src)
        actions = await _actions(client, uri, _line(text, "a, b = y.chunk"), _line(text, "out.mul_(2.0)"))
        titles = [a.title for a in actions]
        fix = next(a for a in actions if a.title.startswith("Stitch: add a shape comment"))
        assert "y" in fix.title
        (edit,) = fix.edit.changes[uri]
        assert edit.new_text.strip().startswith("# stitch: ") and "y=[" in edit.new_text
        disabled = next(a for a in actions if a.title.startswith("Stitch: fuse"))
        assert disabled.disabled is not None and "no shapes for y" in disabled.disabled.reason, titles


MATMUL_FILE = """import torch
import torch.nn.functional as F


def block(x, w, b, scale):
    # stitch: x=[8,1024] float32
    y = F.gelu(x @ w + b) * scale
    return y
"""


async def test_shape_comment_quick_fix_is_consistent_with_the_matmul_and_makes_the_action_runnable(tmp_path):
    """The inserted template never proposes w=[8,1024] for x=[8,1024] @ w; once inserted, fusing is offered."""
    src = tmp_path / "model.py"
    src.write_text(MATMUL_FILE)
    line = _line(MATMUL_FILE, "y = F.gelu")
    async with running_server(tmp_path, capabilities=pull_capabilities(),
                              initialization_options={"trusted": True}) as client:
        uri = await _open(client, src)
        actions = await _actions(client, uri, line, line)
        fix = next(a for a in actions if a.title.startswith("Stitch: add a shape comment"))
        (edit,) = fix.edit.changes[uri]
        comment = edit.new_text.strip()
        assert "x=[8,1024] float32" in comment  # what the user gave is kept
        assert "w=[1024," in comment and "w=[8," not in comment, comment  # w's first dim is x's last
        n = comment.split("w=[1024,")[1].split("]")[0]
        assert f"b=[{n}]" in comment and f"scale=[{n}]" in comment, comment
        # It replaces the partial comment (one comment, not two).
        assert (edit.range.start.line, edit.range.end.line) == (line - 1, line)
        new_text = MATMUL_FILE.replace("    # stitch: x=[8,1024] float32\n", edit.new_text)
        client.text_document_did_change(lsp.DidChangeTextDocumentParams(
            text_document=lsp.VersionedTextDocumentIdentifier(uri=uri, version=2),
            content_changes=[lsp.TextDocumentContentChangeWholeDocument(text=new_text)]))
        actions = await _actions(client, uri, line, line)
        runnable = [a for a in actions if a.title.startswith("Stitch: fuse") and a.command is not None]
        assert runnable and not any(a.disabled for a in actions), [(a.title, a.disabled) for a in actions]


async def test_untrusted_workspace_refuses_to_run(tmp_path):
    src = tmp_path / "block.py"
    shutil.copy(FIXTURE, src)
    text = src.read_text()
    async with running_server(tmp_path, capabilities=pull_capabilities()) as client:
        uri = await _open(client, src)
        start, end = _line(text, "h = self.norm(x + residual)"), _line(text, "h = h * self.scale + self.shift")
        (action,) = [a for a in await _actions(client, uri, start, end) if a.command is not None]
        reply = await client.workspace_execute_command_async(lsp.ExecuteCommandParams(
            command=action.command.command, arguments=action.command.arguments))
        assert reply["job"] is None and "trusted" in reply["message"]


@pytest.mark.timeout(600)
async def test_trusted_workspace_records_missing_shapes_in_the_job(tmp_path):
    """Mid-forward selection, no shape comment: listed (trusted), the job runs the recorder first."""
    src = tmp_path / "block.py"
    shutil.copy(FIXTURE, src)
    text = src.read_text()
    async with running_server(tmp_path, capabilities=pull_capabilities(),
                              initialization_options={"trusted": True}) as client:
        uri = await _open(client, src)
        actions = await _actions(client, uri, _line(text, "a, b = y.chunk"), _line(text, "out.mul_(2.0)"))
        runnable = [a for a in actions if a.command is not None]
        assert runnable, [(a.title, a.disabled) for a in actions]
        reply = await client.workspace_execute_command_async(lsp.ExecuteCommandParams(
            command=runnable[0].command.command, arguments=runnable[0].command.arguments))
        assert reply["job"], reply
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 500
        while loop.time() < deadline and not any(m.message.startswith("Stitch") for m in client.messages):
            await asyncio.sleep(0.5)
        messages = [m.message for m in client.messages]
        assert not any("no shapes" in m for m in messages), messages
        reports = " ".join(getattr(r, "message", "") or "" for rs in client.progress_reports.values() for r in rs)
        assert "recording shapes" in reports, reports
        if not _has_gpu():
            assert any("No CUDA device" in m for m in messages), messages
        tasks = list((tmp_path / ".stitch" / "tasks").glob("*/reference.py"))
        assert tasks and any("torch.randn(32, 1024" in t.read_text() for t in tasks)
