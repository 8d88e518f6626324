"""Bad input to "fuse": a clear message where the user looks, no crash, nothing written to their files.

Each case runs through `stitch fuse` (stderr / stdout, exit status 1) and through the language
server (the code action disabled with the reason, or the job's message and a diagnostic on the
selection).
"""

from __future__ import annotations

import ast
import asyncio
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from lsprotocol import types as lsp

from tests.lsp.harness import pull_capabilities, running_server

REPO = Path(__file__).resolve().parents[2]

MODEL = textwrap.dedent("""
    import torch
    import torch.nn.functional as F
    import not_a_real_package as nrp


    def helper(t):
        return t * 2


    def split(x, b):
        # stitch: x=[8,256] float32, b=[256] float32
        y = F.gelu(
            x + b)
        return y


    def unknown(x, b):
        # stitch: x=[8,256] float32, b=[256] float32
        z = mystery(x) * 2 + b
        return z


    def local_helper(x, b):
        # stitch: x=[8,256] float32, b=[256] float32
        w = helper(x) + b * 2
        return w


    def branches(x, b):
        # stitch: x=[8,256] float32, b=[256] float32
        y = x + b
        if y.sum() > 0:
            y = y * 2
        return y


    def unshaped(x, b):
        v = torch.relu(x) + b * 2
        return v


    def missing_module(x, b):
        # stitch: x=[8,256] float32, b=[256] float32
        v = nrp.act(x) + b * 2
        return v


    def sizes_only(x):
        # stitch: x=[8,256] float32
        n = x.shape[0] * 2 + x.shape[1] * 3
        return n
    """).lstrip()

# (id, first line (substring), last line (substring), what the message says)
SELECTION_PROBLEMS = [
    ("splits-a-statement", "y = F.gelu(", "y = F.gelu(", "splits a statement"),
    ("unknown-function", "z = mystery", "z = mystery", "calls mystery(), which Stitch does not know"),
    ("control-flow", "y = x + b", "y = y * 2", "control flow"),
    ("no-shapes", "v = torch.relu", "v = torch.relu", "no shapes for x, b"),
]
# Selections that become a task: the job (or the CLI) finds the problem when it runs.
JOB_PROBLEMS = [
    ("module-does-not-import", "v = nrp.act", "does not import: ModuleNotFoundError: No module named 'not_a_real_package'"),
    ("no-tensor-ops", "n = x.shape[0]", "Nothing to fuse: the selection runs no tensor ops"),
]


def _line(text: str, needle: str) -> int:
    return next(i for i, l in enumerate(text.splitlines()) if needle in l)


def _workspace(tmp_path: Path, text: str = MODEL) -> Path:
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'user'\n")
    model = tmp_path / "model.py"
    model.write_text(text)
    return model


def _cli(model: Path, start: int, end: int) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "stitch_lsp.cli", "fuse", f"{model}:{start + 1}-{end + 1}",
                           "--no-record"], capture_output=True, text=True, timeout=300, cwd=model.parent,
                          env={**os.environ, "PYTHONPATH": str(REPO), "CUDA_VISIBLE_DEVICES": ""})


def _user_files(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): p.read_text() for p in root.rglob("*")
            if p.is_file() and ".stitch" not in p.parts}


@pytest.mark.parametrize("first,last,says", [c[1:] for c in SELECTION_PROBLEMS], ids=[c[0] for c in SELECTION_PROBLEMS])
def test_cli_says_why_a_selection_cannot_be_fused(tmp_path, first, last, says):
    model = _workspace(tmp_path)
    before = _user_files(tmp_path)
    run = _cli(model, _line(MODEL, first), _line(MODEL, last))
    assert run.returncode == 1 and says in run.stderr, run.stderr
    assert "Traceback" not in run.stderr
    assert _user_files(tmp_path) == before


@pytest.mark.timeout(300)
@pytest.mark.parametrize("needle,says", [c[1:] for c in JOB_PROBLEMS], ids=[c[0] for c in JOB_PROBLEMS])
def test_cli_says_why_a_task_cannot_be_fused(tmp_path, needle, says):
    model = _workspace(tmp_path)
    before = _user_files(tmp_path)
    line = _line(MODEL, needle)
    run = _cli(model, line, line)
    assert run.returncode == 1 and says in run.stdout, run.stdout + run.stderr
    assert "Traceback" not in run.stdout + run.stderr
    assert _user_files(tmp_path) == before


def test_cli_suggests_a_shape_comment_consistent_with_the_selection(tmp_path):
    text = MODEL + "\n\ndef project(x, w, b):\n    y = F.gelu(x @ w + b)\n    return y\n"
    model = _workspace(tmp_path, text)
    line = _line(text, "y = F.gelu(x @ w")
    run = _cli(model, line, line)
    assert run.returncode == 1 and "no shapes for x, w, b" in run.stderr, run.stderr
    suggested = run.stderr.strip().splitlines()[-1]
    assert suggested.strip() == "# stitch: B=8, D=1024, N=1024, x=[B,D] float32, w=[D,N] float32, b=[N] float32"
    # Pasted above the selection, it is enough to fuse (here: planned and generated, no GPU).
    model.write_text(text.replace("    y = F.gelu(x @ w", suggested + "\n    y = F.gelu(x @ w"))
    again = subprocess.run([sys.executable, "-m", "stitch_lsp.cli", "fuse", f"{model}:{line + 2}-{line + 2}",
                            "--no-record", "--no-verify"], capture_output=True, text=True, timeout=300,
                           cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert again.returncode == 0 and "Generated" in again.stdout, again.stdout + again.stderr


def test_cli_reports_a_file_with_syntax_errors(tmp_path):
    broken = MODEL.replace("    return w\n", "    return w +\n")
    assert broken != MODEL
    model = _workspace(tmp_path, broken)
    line = _line(broken, "v = nrp.act")
    run = _cli(model, line, line)
    assert run.returncode == 1 and "the file has syntax errors" in run.stderr, run.stderr


async def _open(client, path: Path, text: str) -> str:
    uri = path.as_uri()
    client.text_document_did_open(lsp.DidOpenTextDocumentParams(
        text_document=lsp.TextDocumentItem(uri=uri, language_id="python", version=1, text=text)))
    return uri


async def _actions(client, uri: str, start: int, end: int) -> list[lsp.CodeAction]:
    result = await client.text_document_code_action_async(lsp.CodeActionParams(
        text_document=lsp.TextDocumentIdentifier(uri=uri),
        range=lsp.Range(lsp.Position(start, 0), lsp.Position(end + 1, 0)),
        context=lsp.CodeActionContext(diagnostics=[])))
    out = []
    for a in result or []:
        if isinstance(a, lsp.Command) and a.command.startswith("{"):
            inner = ast.literal_eval(a.command)  # see test_fuse_lsp_e2e._actions
            a = lsp.CodeAction(title=a.title, kind=lsp.CodeActionKind.RefactorRewrite,
                               command=lsp.Command(title=inner["title"], command=inner["command"],
                                                   arguments=inner.get("arguments")))
        if isinstance(a, lsp.CodeAction) and a.title.startswith("Stitch"):
            out.append(a)
    return out


async def test_lsp_disables_the_action_with_the_reason(tmp_path):
    model = _workspace(tmp_path)
    async with running_server(tmp_path, capabilities=pull_capabilities(),
                              initialization_options={"trusted": True}) as client:
        uri = await _open(client, model, MODEL)
        for case_id, first, last, says in SELECTION_PROBLEMS:
            actions = await _actions(client, uri, _line(MODEL, first), _line(MODEL, last))
            fuse = [a for a in actions if a.title.startswith("Stitch: fuse")]
            assert fuse and fuse[0].disabled is not None and says in fuse[0].disabled.reason, \
                (case_id, [(a.title, a.disabled) for a in actions])
        # A command sent anyway (a stale client) is refused with the same reason, and no job starts.
        line = _line(MODEL, "z = mystery")
        reply = await client.workspace_execute_command_async(lsp.ExecuteCommandParams(
            command="stitch.fuse", arguments=[uri, 1, line, line]))
        assert reply["job"] is None and "mystery" in reply["message"]
    assert model.read_text() == MODEL


async def _run_job(client, uri: str, line: int, version: int = 1) -> dict:
    return await client.workspace_execute_command_async(lsp.ExecuteCommandParams(
        command="stitch.fuse", arguments=[uri, version, line, line]))


async def _wait(predicate, seconds: float) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    while loop.time() < deadline and not predicate():
        await asyncio.sleep(0.3)


@pytest.mark.timeout(300)
async def test_lsp_job_problems_reach_the_user_as_a_message_and_a_diagnostic(tmp_path):
    model = _workspace(tmp_path)
    before = _user_files(tmp_path)
    async with running_server(tmp_path, capabilities=pull_capabilities(),
                              initialization_options={"trusted": True}) as client:
        uri = await _open(client, model, MODEL)
        for case_id, needle, says in JOB_PROBLEMS:
            line = _line(MODEL, needle)
            reply = await _run_job(client, uri, line)
            assert reply["job"], (case_id, reply)
            await _wait(lambda: any(says in m.message for m in client.messages), 240)
            assert any(says in m.message for m in client.messages), (case_id, [m.message for m in client.messages])
            report = await client.text_document_diagnostic_async(lsp.DocumentDiagnosticParams(
                text_document=lsp.TextDocumentIdentifier(uri=uri)))
            fuse = [d for d in report.items if d.code == "FUSE"]
            assert fuse and says in fuse[0].message and fuse[0].range.start.line == line, (case_id, report.items)
    assert _user_files(tmp_path) == before


@pytest.mark.timeout(300)
async def test_lsp_edit_during_the_job_cancels_it_and_applies_nothing(tmp_path):
    text = MODEL.replace("    v = torch.relu(x) + b * 2\n",
                         "    # stitch: x=[8,256] float32, b=[256] float32\n    v = torch.relu(x) + b * 2\n")
    assert text != MODEL
    model = _workspace(tmp_path, text)
    before = _user_files(tmp_path)
    applied: list = []

    def before_init(client):
        @client.feature(lsp.WORKSPACE_APPLY_EDIT)
        def apply_edit(params):
            applied.append(params)
            return lsp.ApplyWorkspaceEditResult(applied=False)

    async with running_server(tmp_path, capabilities=pull_capabilities(), initialization_options={"trusted": True},
                              before_initialize=before_init) as client:
        uri = await _open(client, model, text)
        line = _line(text, "v = torch.relu")
        reply = await _run_job(client, uri, line)
        assert reply["job"], reply
        client.text_document_did_change(lsp.DidChangeTextDocumentParams(
            text_document=lsp.VersionedTextDocumentIdentifier(uri=uri, version=2),
            content_changes=[lsp.TextDocumentContentChangeWholeDocument(text=text + "\n# edited\n")]))

        def ended() -> list[str]:
            return [getattr(r, "message", "") or "" for rs in client.progress_reports.values() for r in rs
                    if isinstance(r, lsp.WorkDoneProgressEnd)]

        await _wait(lambda: any("cancelled" in m or "changed" in m for m in ended())
                    or any("changed" in m.message for m in client.messages), 240)
        said = ended() + [m.message for m in client.messages]
        assert any("the document changed" in m for m in said), said
        # The version offered is now stale: running the old action again is refused.
        again = await _run_job(client, uri, line, version=1)
        assert again["job"] is None and "changed" in again["message"]
    assert not applied
    assert _user_files(tmp_path) == before
