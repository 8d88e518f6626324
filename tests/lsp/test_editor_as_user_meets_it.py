"""The editor fixes of issue 34, each over stdio against the real server, as VS Code uses it.

- the fuse result as something to act on (buttons, files, code actions, the report from the Python file),
  with the candidate compiled by nvcc where there is no GPU;
- trust messages from each value's real scope (``"$scopes"``), once, withdrawn on trust;
- no verification job where there is no GPU, and the hint at once;
- "Cancel All Jobs" says what it did; no Markdown in the Problems panel or menus; the start does not
  import the fuse pipeline.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from lsprotocol import types as lsp

from tests.lsp.harness import (
    REPO,
    open_doc,
    plain,
    pull_capabilities,
    pushed,
    running_server,
    save_doc,
    server_env,
    wait_until,
)

FIXTURE = REPO / "tests" / "fixtures" / "fuse" / "block.py"
HAS_GPU = shutil.which("nvidia-smi") is not None

UNGUARDED = textwrap.dedent("""\
    __global__ void scale(const float* x, float* y, float a, int n) {
        int i = blockIdx.x * blockDim.x + threadIdx.x;
        y[i] = a * x[i];
    }
    """)


def _capabilities() -> lsp.ClientCapabilities:
    caps = pull_capabilities()
    caps.window = lsp.WindowClientCapabilities(
        work_done_progress=True, show_document=lsp.ShowDocumentClientCapabilities(support=True),
        show_message=lsp.ShowMessageRequestClientCapabilities(
            message_action_item=lsp.ClientShowMessageActionItemOptions(additional_properties_support=True)))
    return caps


def _line(text: str, needle: str) -> int:
    return next(i for i, line in enumerate(text.splitlines()) if needle in line)


# -- the fuse result ----------------------------------------------------------------------------------
@pytest.mark.timeout(600)
@pytest.mark.skipif(HAS_GPU, reason="the no-GPU ending; on a GPU the edit is offered (tests/fuse)")
async def test_fuse_without_a_gpu_ends_in_buttons_that_open_the_candidate_diff_and_report(tmp_path):
    src = tmp_path / "block.py"
    shutil.copy(FIXTURE, src)
    text = src.read_text()
    asked: list[lsp.ShowMessageRequestParams] = []

    def before(client):
        @client.feature(lsp.WINDOW_SHOW_MESSAGE_REQUEST)
        def message_request(params: lsp.ShowMessageRequestParams):
            asked.append(params)
            return lsp.MessageActionItem(title="Show report")

    async with running_server(tmp_path, capabilities=_capabilities(), initialization_options={"trusted": True},
                              before_initialize=before) as client:
        uri = open_doc(client, src, language="python")
        start, end = _line(text, "h = self.norm(x + residual)"), _line(text, "h = h * self.scale + self.shift")
        reply = await client.workspace_execute_command_async(lsp.ExecuteCommandParams(
            command="stitch.fuse", arguments=[uri, 1, start, end]))
        assert reply["job"], reply
        await wait_until(lambda: asked, 540, "the fuse result message")

        [request] = asked
        assert request.message.startswith("Stitch: No CUDA device here"), request.message
        assert [a.title for a in request.actions] == ["Open candidate", "Show diff", "Show report"]
        assert "`" not in request.message
        # The button opened the report, a file beside the candidate.
        await wait_until(lambda: client.shown_documents, 10, "window/showDocument")
        report_uri = client.shown_documents[0].uri
        assert report_uri.endswith("/report.md") and "/.stitch/tasks/" in report_uri
        report = Path(report_uri.removeprefix("file://")).read_text()
        assert "## Plan" in report and "candidate" in report

        task_dir = Path(report_uri.removeprefix("file://")).parent
        diff = (task_dir / "edit.diff").read_text()
        assert diff.startswith("--- a/block.py") and "+++ b/block.py" in diff, diff[:300]
        verdict = json.loads((task_dir / "verdict.json").read_text())
        assert verdict["status"] == "no_gpu"
        if shutil.which("nvcc"):
            # Compiled here all the same: the verdict's compile is filled, with registers and spills.
            compiled = verdict["compile"]
            assert compiled is not None and compiled["backend"] == "nvcc", compiled
            assert compiled["ok"] is True, compiled.get("log")
            assert compiled["kernels"] and "registers" in compiled["kernels"][0]
            assert "registers" in request.message and "nvcc compiled it" in request.message

        # Ctrl+. on the selection offers the same three.
        actions = await client.text_document_code_action_async(lsp.CodeActionParams(
            text_document=lsp.TextDocumentIdentifier(uri=uri),
            range=lsp.Range(lsp.Position(start, 0), lsp.Position(end, 0)), context=lsp.CodeActionContext(diagnostics=[])))
        titles = [a.title for a in actions or []]
        assert {"Stitch: open the fuse candidate", "Stitch: show the fuse diff", "Stitch: show the fuse report"} <= set(titles)

        # "Show Last Report" from the Python file: the fuse report, not a kernel's.
        shown = plain(await client.workspace_execute_command_async(lsp.ExecuteCommandParams(
            command="stitch.showReport", arguments=[uri, {"line": start, "character": 4}])))
        assert shown["path"] == str(task_dir / "report.md")


# -- trust messages from the real scope ----------------------------------------------------------------
async def test_untrusted_reports_only_what_the_workspace_set_once_and_withdraws_it_on_trust(tmp_path):
    (tmp_path / "k.cu").write_text(UNGUARDED)
    settings = {
        "python": sys.executable,  # the user's own: must neither be dropped nor reported
        "nvccPath": "./tools/evil-nvcc",  # the workspace's: dropped and reported
        "onSave": {"compile": False},
        "$scopes": {"python": "user", "nvccPath": "workspace", "onSave.compile": "user"},
    }
    told: list[dict] = []

    def before(client):
        @client.feature("stitch/untrustedSettings")
        def untrusted(params):
            told.append(plain(params))

    async with running_server(tmp_path, settings=settings, before_initialize=before,
                              initialization_options={"trusted": False, "handles": ["stitch/untrustedSettings"],
                                                      "settings": settings}) as client:
        info = None
        await wait_until(lambda: told, 10, "stitch/untrustedSettings")
        info = plain(await client.protocol.send_request_async("stitch/serverInfo", {}))
        assert info["settings"]["python"] == sys.executable  # the user's own value is kept
        assert info["settings"]["nvcc_path"] == "nvcc"
        # A settings change (a re-pull) does not say it again.
        client.workspace_did_change_configuration(lsp.DidChangeConfigurationParams(settings=None))
        await asyncio.sleep(1.0)
        assert len(told) == 1, told
        [message] = told
        assert [i["setting"] for i in message["ignored"]] == ["nvccPath"]
        assert message["ignored"][0]["source"] == "workspace settings"
        assert "python" not in message["message"] and "nvccPath ./tools/evil-nvcc" in message["message"]
        # It came as the client's own notification, not a second, overlapping window/showMessage.
        assert not [m for m in client.messages if "trust" in m.message]

        client.protocol.notify("stitch/setTrusted", {"trusted": True})
        await wait_until(lambda: len(told) == 2, 10, "the withdrawal")
        assert told[1]["ignored"] == []


async def test_an_editor_without_scopes_still_gets_one_plain_message(tmp_path):
    """Another editor (no "$scopes", no handles): the old behaviour, one window/showMessage."""
    (tmp_path / "pyproject.toml").write_text('[tool.stitch]\nnvccPath = "./evil"\n')
    (tmp_path / "k.cu").write_text(UNGUARDED)
    async with running_server(tmp_path, initialization_options={"trusted": False}) as client:
        await wait_until(lambda: [m for m in client.messages if "until you trust it" in m.message], 10, "the message")
        await asyncio.sleep(0.5)
        assert len([m for m in client.messages if "until you trust it" in m.message]) == 1


# -- no doomed jobs ---------------------------------------------------------------------------------------
@pytest.mark.skipif(HAS_GPU, reason="no-GPU behaviour")
async def test_saving_a_paired_kernel_without_a_gpu_starts_no_job_and_says_no_gpu_once(tmp_path):
    from tests.jobs.test_kernel_checks_e2e import CU, NAME_LINE, hint_labels_until, workspace

    cu = workspace(tmp_path, CU)
    async with running_server(tmp_path, capabilities=pull_capabilities(), settings={"onSave": {"compile": False}},
                              initialization_options={"trusted": True}) as client:
        uri = open_doc(client, cu)
        started = time.monotonic()
        save_doc(client, uri)
        found = await hint_labels_until(client, uri, lambda labels: any(l.strip() == "no GPU" for l in labels), 10)
        assert time.monotonic() - started < 5, "the hint comes at once, not after a worker gave up"
        assert found
        save_doc(client, uri)
        await asyncio.sleep(1.5)
        assert not client.progress_reports, "no verification job was started"
        assert len([m for m in client.messages if "No NVIDIA GPU" in m.message]) == 1
        reply = await client.workspace_execute_command_async(lsp.ExecuteCommandParams(
            command="stitch.verifyKernel", arguments=[uri, {"line": NAME_LINE, "character": 18}]))
        assert plain(reply)["ok"] is False and "No NVIDIA GPU" in plain(reply)["message"]


# -- polish -------------------------------------------------------------------------------------------------
async def test_cancel_all_with_nothing_running_says_so(tmp_path):
    async with running_server(tmp_path) as client:
        reply = await client.workspace_execute_command_async(lsp.ExecuteCommandParams(command="stitch.cancelAll"))
        assert plain(reply) == {"cancelled": 0}
        await wait_until(lambda: [m for m in client.messages if m.message == "Stitch: no jobs were running."], 5,
                         "the feedback")


async def test_problems_and_quick_fix_titles_carry_no_markdown(tmp_path):
    cu = tmp_path / "k.cu"
    cu.write_text(UNGUARDED)
    async with running_server(tmp_path, settings={"onSave": {"compile": False}}) as client:
        uri = open_doc(client, cu)
        diagnostics = await pushed(client, uri, lambda d: any(x.code == "STC001" for x in d), 20)
        assert diagnostics and not [d.message for d in diagnostics if "`" in d.message or "**" in d.message]
        [d] = [d for d in diagnostics if d.code == "STC001"]
        actions = await client.text_document_code_action_async(lsp.CodeActionParams(
            text_document=lsp.TextDocumentIdentifier(uri=uri), range=d.range,
            context=lsp.CodeActionContext(diagnostics=[d])))
        titles = [a.title for a in actions or []]
        assert any(t.startswith("Guard it") for t in titles), titles
        assert not [t for t in titles if "`" in t], titles


async def test_hover_never_stops_mid_sentence(tmp_path):
    cu = tmp_path / "k.cu"
    cu.write_text(UNGUARDED)
    async with running_server(tmp_path, settings={"onSave": {"compile": False}}) as client:
        uri = open_doc(client, cu)
        await pushed(client, uri, lambda d: any(x.code == "STC001" for x in d), 20)
        hover = await client.text_document_hover_async(lsp.HoverParams(
            text_document=lsp.TextDocumentIdentifier(uri=uri), position=lsp.Position(0, 17)))
        lines = [l for l in hover.contents.value.splitlines() if "STC001" in l]
        assert lines, hover.contents.value
        for line in lines:
            assert line.rstrip().endswith((".", "…", ")", "'", "`")), line


def test_the_server_starts_without_the_fuse_pipeline():
    """Fast start: initialize and static diagnostics need no planner, Coders or Anthropic client."""
    code = ("import sys, stitch_lsp.lsp.server as s; s.create_server(); "
            "bad = [m for m in ('anthropic', 'torch', 'stitch_lsp.fuse.service', 'stitch_lsp.plan.planner') "
            "if m in sys.modules]; print(bad); sys.exit(1 if bad else 0)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=server_env(), timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
