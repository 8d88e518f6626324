"""Paired-kernel checks through the real server over stdio (pytest-lsp).

The Verifier is the CPU stand-in (tests/jobs/stand_in_verifier.py): a real job
whose worker is a child process, so progress, cancellation (the process dies),
edits, the cache across restarts and trust are all exercised for real."""

from __future__ import annotations

import json
import textwrap
import time
from pathlib import Path

import pytest
from lsprotocol import types as lsp

from tests.lsp.harness import open_doc, plain, pull_capabilities, running_server, save_doc, wait_until

STAND_IN = "tests.jobs.stand_in_verifier:StandInVerifier"

REF = textwrap.dedent(
    """\
    import torch
    import torch.nn as nn


    class Model(nn.Module):
        def forward(self, x):
            return torch.nn.functional.gelu(x) * 2.0


    def get_inputs():
        return [torch.randn(4096, 4096)]


    def get_init_inputs():
        return []
    """
)

CU = textwrap.dedent(
    """\
    #include <cuda_runtime.h>

    // stitch: reference=ref/gelu_ref.py
    __global__ void fused_gelu_scale(const float* x, float* out, int n) {
        int i = blockIdx.x * blockDim.x + threadIdx.x;
        if (i < n) out[i] = 2.0f * 0.5f * x[i] * (1.0f + erff(x[i] * 0.70710678f));
    }

    void launch(const float* x, float* out, int n) {
        fused_gelu_scale<<<(n + 255) / 256, 256>>>(x, out, n);
    }
    """
)

NAME_LINE = 3  # the __global__ line
LAUNCH_LINE = 9


def workspace(tmp_path: Path, cu: str = CU) -> Path:
    (tmp_path / "ref").mkdir(exist_ok=True)
    (tmp_path / "ref" / "gelu_ref.py").write_text(REF)
    (tmp_path / "gelu.cu").write_text(cu)
    return tmp_path / "gelu.cu"


def env(tmp_path: Path, seconds: float = 0.3) -> dict[str, str]:
    return {
        "STITCH_TEST_VERIFIER": STAND_IN,
        "STAND_IN_SECONDS": str(seconds),
        "STAND_IN_LOG": str(tmp_path / "stand_in.jsonl"),
    }


def runs(tmp_path: Path) -> list[dict]:
    path = tmp_path / "stand_in.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def pid_alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


SETTINGS = {"onSave": {"compile": False}}
TRUSTED = {"trusted": True}


async def hints(client, uri) -> list[lsp.InlayHint]:
    return await client.text_document_inlay_hint_async(
        lsp.InlayHintParams(
            text_document=lsp.TextDocumentIdentifier(uri=uri),
            range=lsp.Range(start=lsp.Position(line=0, character=0), end=lsp.Position(line=100, character=0)),
        )
    ) or []


def labels(found: list[lsp.InlayHint]) -> list[str]:
    return [h.label if isinstance(h.label, str) else "".join(p.value for p in h.label) for h in found]


async def hint_labels_until(client, uri, predicate, timeout=60.0) -> list[str]:
    result: list[str] = []

    async def poll():
        nonlocal result
        result = labels(await hints(client, uri))
        return predicate(result)

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if await poll():
            return result
        import asyncio

        await asyncio.sleep(0.1)
    raise AssertionError(f"hints never matched; last: {result}")


async def hover(client, uri, line, character) -> str:
    answer = await client.text_document_hover_async(
        lsp.HoverParams(text_document=lsp.TextDocumentIdentifier(uri=uri), position=lsp.Position(line=line, character=character))
    )
    return answer.contents.value if answer is not None else ""


def progress_of(client, title: str):
    for token, values in client.progress_reports.items():
        if values and isinstance(values[0], lsp.WorkDoneProgressBegin) and values[0].title == title:
            return token, values
    return None


async def test_progress_begin_report_end_and_verdict_hints(tmp_path):
    cu = workspace(tmp_path)
    async with running_server(tmp_path, capabilities=pull_capabilities(), settings=SETTINGS,
                              initialization_options=TRUSTED, env=env(tmp_path, 0.6)) as client:
        uri = open_doc(client, cu)
        save_doc(client, uri)
        token, values = await wait_until(lambda: (lambda p: p if p and isinstance(p[1][-1], lsp.WorkDoneProgressEnd) else None)(
            progress_of(client, "Verify fused_gelu_scale")), 30, "progress to end")
        assert isinstance(values[0], lsp.WorkDoneProgressBegin) and values[0].cancellable
        reports = [v for v in values if isinstance(v, lsp.WorkDoneProgressReport)]
        messages = [r.message for r in reports]
        assert any(m.startswith("compiling") for m in messages) and any(m.startswith("timing") for m in messages)
        percents = [r.percentage for r in reports]
        assert percents == sorted(percents) and percents[-1] >= 70
        assert values[-1].message == "done"
        found = await hint_labels_until(client, uri, lambda ls: "✓ correct (6/6 checks)" in ls)
        assert "2.31× eager · 1.05× torch.compile" in found
        card = await hover(client, uri, NAME_LINE, 20)
        assert "✓ correct" in card and "2.31× eager" in card and "Not profiled yet" in card
        [start, end] = runs(tmp_path)
        assert start["event"] == "start" and end["event"] == "end"


async def test_cancel_from_the_progress_ui_kills_the_worker(tmp_path):
    cu = workspace(tmp_path)
    async with running_server(tmp_path, capabilities=pull_capabilities(), settings=SETTINGS,
                              initialization_options=TRUSTED, env=env(tmp_path, 60)) as client:
        uri = open_doc(client, cu)
        save_doc(client, uri)
        started = await wait_until(lambda: [r for r in runs(tmp_path) if r["event"] == "start"], 60, "the worker to start")
        pid = started[0]["pid"]
        assert pid_alive(pid)
        token, _ = await wait_until(lambda: progress_of(client, "Verify fused_gelu_scale"), 30, "progress to begin")
        client.window_work_done_progress_cancel(lsp.WorkDoneProgressCancelParams(token=token))
        await wait_until(lambda: isinstance(client.progress_reports[token][-1], lsp.WorkDoneProgressEnd), 30, "progress to end")
        assert client.progress_reports[token][-1].message == "cancelled: cancelled from the progress UI"
        await wait_until(lambda: not pid_alive(pid), 20, f"worker {pid} to be gone")
        found = await hint_labels_until(client, uri, lambda ls: "not verified" in ls)
        assert not any("correct" in label for label in found)


async def test_an_edit_during_a_job_cancels_it(tmp_path):
    cu = workspace(tmp_path)
    async with running_server(tmp_path, capabilities=pull_capabilities(), settings=SETTINGS,
                              initialization_options=TRUSTED, env=env(tmp_path, 60)) as client:
        uri = open_doc(client, cu)
        save_doc(client, uri)
        started = await wait_until(lambda: [r for r in runs(tmp_path) if r["event"] == "start"], 60, "the worker to start")
        pid = started[0]["pid"]
        token, _ = await wait_until(lambda: progress_of(client, "Verify fused_gelu_scale"), 30, "progress to begin")
        client.text_document_did_change(lsp.DidChangeTextDocumentParams(
            text_document=lsp.VersionedTextDocumentIdentifier(uri=uri, version=2),
            content_changes=[lsp.TextDocumentContentChangePartial(
                range=lsp.Range(start=lsp.Position(line=0, character=0), end=lsp.Position(line=0, character=0)), text="// edited\n")],
        ))
        await wait_until(lambda: isinstance(client.progress_reports[token][-1], lsp.WorkDoneProgressEnd), 30, "progress to end")
        assert client.progress_reports[token][-1].message == "cancelled: the document changed"
        await wait_until(lambda: not pid_alive(pid), 20, f"worker {pid} to be gone")


async def test_cached_verdict_comes_back_after_a_restart(tmp_path):
    cu = workspace(tmp_path)
    for attempt in range(2):
        async with running_server(tmp_path, capabilities=pull_capabilities(), settings=SETTINGS,
                                  initialization_options=TRUSTED, env=env(tmp_path)) as client:
            uri = open_doc(client, cu)
            save_doc(client, uri)
            await hint_labels_until(client, uri, lambda ls: "✓ correct (6/6 checks)" in ls)
            found = await hints(client, uri)
            badge = next(h for h in found if labels([h])[0].startswith("✓"))
            tooltip = badge.tooltip.value if hasattr(badge.tooltip, "value") else str(badge.tooltip)
            assert ("result cache" in tooltip) == (attempt == 1)
    assert [r["event"] for r in runs(tmp_path)] == ["start", "end"], "the second server must answer from the cache"
    assert list((tmp_path / ".stitch" / "cache").rglob("*.json"))


async def test_profile_on_save_puts_nsight_figures_in_hints_and_hovers(tmp_path):
    cu = workspace(tmp_path)
    settings = {"onSave": {"compile": False, "profile": True}}
    async with running_server(tmp_path, capabilities=pull_capabilities(), settings=settings,
                              initialization_options=TRUSTED, env=env(tmp_path)) as client:
        uri = open_doc(client, cu)
        save_doc(client, uri)
        found = await hint_labels_until(client, uri, lambda ls: "DRAM 55 % of peak" in ls)
        assert "✓ correct (6/6 checks)" in found and "2.31× eager · 1.05× torch.compile" in found
        for line, char in ((NAME_LINE, 20), (LAUNCH_LINE, 6)):  # the name, then a launch site
            card = await hover(client, uri, line, char)
            for text in ("Nsight Compute", "63.6 µs", "53.1 %", "74.6 % achieved of 100.0 % theoretical", "latency-bound", "Try next"):
                assert text in card, (line, text, card)
        assert await hover(client, uri, 5, 10) == "" or "Nsight" not in await hover(client, uri, 5, 10)


async def test_untrusted_workspace_runs_nothing_and_says_why(tmp_path):
    cu = workspace(tmp_path)
    async with running_server(tmp_path, capabilities=pull_capabilities(), settings=SETTINGS, env=env(tmp_path)) as client:
        uri = open_doc(client, cu)
        save_doc(client, uri)
        found = await hint_labels_until(client, uri, lambda ls: "verification off: workspace not trusted" in ls)
        answer = await client.workspace_execute_command_async(lsp.ExecuteCommandParams(
            command="stitch.verifyKernel", arguments=[uri, {"line": NAME_LINE, "character": 20}]))
        answer = plain(answer)
        assert answer["ok"] is False and "not trusted" in answer["message"]
        card = await hover(client, uri, NAME_LINE, 20)
        assert "not trusted" in card
        import asyncio

        await asyncio.sleep(1.0)
        assert runs(tmp_path) == [], "nothing may run in an untrusted workspace"
        assert not progress_of(client, "Verify fused_gelu_scale")
        assert found


async def test_trust_arriving_later_enables_verification(tmp_path):
    cu = workspace(tmp_path)
    async with running_server(tmp_path, capabilities=pull_capabilities(), settings=SETTINGS, env=env(tmp_path)) as client:
        uri = open_doc(client, cu)
        await hint_labels_until(client, uri, lambda ls: "verification off: workspace not trusted" in ls)
        client.protocol.notify("stitch/setTrusted", {"trusted": True})
        await hint_labels_until(client, uri, lambda ls: "verification off: workspace not trusted" not in ls)
        save_doc(client, uri)
        await hint_labels_until(client, uri, lambda ls: "✓ correct (6/6 checks)" in ls)


async def test_bad_pairings_are_diagnostics_and_nothing_runs(tmp_path):
    cu = workspace(tmp_path, CU.replace("reference=ref/gelu_ref.py", "refrence=ref/gelu_ref.py"))
    async with running_server(tmp_path, capabilities=pull_capabilities(), settings=SETTINGS,
                              initialization_options=TRUSTED, env=env(tmp_path)) as client:
        uri = open_doc(client, cu)
        report = await client.text_document_diagnostic_async(lsp.DocumentDiagnosticParams(text_document=lsp.TextDocumentIdentifier(uri=uri)))
        deadline = time.monotonic() + 20
        while not any("did you mean 'reference'" in d.message for d in report.items) and time.monotonic() < deadline:
            import asyncio

            await asyncio.sleep(0.1)
            report = await client.text_document_diagnostic_async(lsp.DocumentDiagnosticParams(text_document=lsp.TextDocumentIdentifier(uri=uri)))
        [d] = [d for d in report.items if "did you mean 'reference'" in d.message]
        assert d.range.start.line == 2
        actions = await client.text_document_code_action_async(lsp.CodeActionParams(
            text_document=lsp.TextDocumentIdentifier(uri=uri), range=d.range,
            context=lsp.CodeActionContext(diagnostics=[d])))
        assert any("Change 'refrence' to 'reference'" in a.title for a in actions or [])
        save_doc(client, uri)
        await hint_labels_until(client, uri, lambda ls: "not verified: pairing problem" in ls)
        assert runs(tmp_path) == []


async def test_wrong_kernel_and_sanitizer_findings_are_diagnostics_at_their_lines(tmp_path):
    cu = workspace(tmp_path, CU.replace("    if (i < n) out[i]", "    if (i < n) out[i] /* STITCH_TEST_WRONG STITCH_TEST_SANITIZER */"))
    async with running_server(tmp_path, capabilities=pull_capabilities(), settings={"onSave": {"compile": False, "sanitize": True}},
                              initialization_options=TRUSTED, env=env(tmp_path)) as client:
        uri = open_doc(client, cu)
        save_doc(client, uri)
        await hint_labels_until(client, uri, lambda ls: "✗ 1/7 checks failed" in ls)
        report = await client.text_document_diagnostic_async(lsp.DocumentDiagnosticParams(text_document=lsp.TextDocumentIdentifier(uri=uri)))
        wrong = [d for d in report.items if d.code == "STITCH-WRONG"]
        assert wrong and wrong[0].range.start.line == NAME_LINE and "1 of 7 checks failed" in wrong[0].message
        assert "odd-shape" in wrong[0].message
        san = [d for d in report.items if d.code == "sanitizer-memcheck"]
        assert san and san[0].range.start.line == 5 and "Invalid __global__ write" in san[0].message


async def test_commands_verify_cancel_all_report_and_status(tmp_path):
    cu = workspace(tmp_path)
    statuses: list = []
    async with running_server(tmp_path, capabilities=pull_capabilities(), settings={"onSave": {"compile": False, "verify": False}},
                              initialization_options=TRUSTED, env=env(tmp_path, 60)) as client:
        client.feature("stitch/status")(lambda params: statuses.append(plain(params)))
        uri = open_doc(client, cu)
        await hint_labels_until(client, uri, lambda ls: "paired: verify on save is off" in ls)
        # Verify from the launch site; then cancel everything.
        answer = await client.workspace_execute_command_async(lsp.ExecuteCommandParams(
            command="stitch.verifyKernel", arguments=[uri, {"line": LAUNCH_LINE, "character": 6}]))
        answer = plain(answer)
        assert answer["ok"] is True and answer["kernel"] == "fused_gelu_scale" and answer["jobId"]
        started = await wait_until(lambda: [r for r in runs(tmp_path) if r["event"] == "start"], 60, "the worker to start")
        await wait_until(lambda: any(s["running"] == 1 for s in statuses), 30, "a status with a running job")
        cancelled = await client.workspace_execute_command_async(lsp.ExecuteCommandParams(command="stitch.cancelAll", arguments=[]))
        assert plain(cancelled)["cancelled"] == 1
        await wait_until(lambda: not pid_alive(started[0]["pid"]), 20, "the worker to be gone")
        await wait_until(lambda: statuses[-1]["running"] == 0, 30, "an idle status")
        assert statuses[-1]["trusted"] is True
        # No verdict yet: the report command says so.
        none = await client.workspace_execute_command_async(lsp.ExecuteCommandParams(command="stitch.showReport", arguments=[]))
        assert plain(none)["path"] is None
    # A finished verification, then its report.
    async with running_server(tmp_path, capabilities=pull_capabilities(), settings={"onSave": {"compile": False}},
                              initialization_options=TRUSTED, env=env(tmp_path)) as client:
        client.feature("stitch/status")(lambda params: statuses.append(plain(params)))
        uri = open_doc(client, cu)
        save_doc(client, uri)
        await hint_labels_until(client, uri, lambda ls: "✓ correct (6/6 checks)" in ls)
        out = await client.workspace_execute_command_async(lsp.ExecuteCommandParams(
            command="stitch.showReport", arguments=[uri, {"line": NAME_LINE, "character": 20}]))
        path = Path(plain(out)["path"])
        assert path.parent == tmp_path / ".stitch" / "reports" and path.name.startswith("fused_gelu_scale-")
        text = path.read_text()
        assert "# `fused_gelu_scale` — ✓ correct" in text and "## Timing" in text and "ref/gelu_ref.py" in text
        await wait_until(lambda: statuses[-1]["lastReport"] == str(path), 30, "status with the report")
        assert statuses[-1]["gpu"] == "Stand-in GPU (CPU test)"


@pytest.mark.timeout(60)
async def test_a_job_outliving_its_timeout_is_stopped_with_a_message(tmp_path):
    cu = workspace(tmp_path)
    async with running_server(tmp_path, capabilities=pull_capabilities(), settings={"onSave": {"compile": False}, "verifyTimeoutS": 1},
                              initialization_options=TRUSTED, env=env(tmp_path, 60)) as client:
        uri = open_doc(client, cu)
        save_doc(client, uri)
        started = await wait_until(lambda: [r for r in runs(tmp_path) if r["event"] == "start"], 60, "the worker to start")
        await wait_until(lambda: any("timed out after 6.2 s" in m.message for m in client.messages), 20, "a timeout message")
        await wait_until(lambda: not pid_alive(started[0]["pid"]), 20, "the worker to be gone")
        await hint_labels_until(client, uri, lambda ls: "⏱ timed out" in ls)


async def test_shutdown_kills_running_workers(tmp_path):
    cu = workspace(tmp_path)
    async with running_server(tmp_path, capabilities=pull_capabilities(), settings={"onSave": {"compile": False, "verify": False}},
                              initialization_options=TRUSTED, env=env(tmp_path, 60)) as client:
        uri = open_doc(client, cu)
        answer = plain(await client.workspace_execute_command_async(lsp.ExecuteCommandParams(
            command="stitch.profileKernel", arguments=[uri, {"line": NAME_LINE, "character": 20}])))
        assert answer["ok"] is True
        started = await wait_until(lambda: [r for r in runs(tmp_path) if r["event"] == "start"], 60, "the worker to start")
        assert started[0]["profile"] is True
        await wait_until(lambda: progress_of(client, "Profile fused_gelu_scale"), 30, "profile progress")
        pid = started[0]["pid"]
        assert pid_alive(pid)
    # The session is shut down: its worker must not outlive it.
    await wait_until(lambda: not pid_alive(pid), 20, f"worker {pid} to be gone after shutdown")


async def test_a_corrupt_cache_entry_is_ignored_and_replaced(tmp_path):
    cu = workspace(tmp_path)
    async with running_server(tmp_path, capabilities=pull_capabilities(), settings=SETTINGS,
                              initialization_options=TRUSTED, env=env(tmp_path)) as client:
        uri = open_doc(client, cu)
        save_doc(client, uri)
        await hint_labels_until(client, uri, lambda ls: "✓ correct (6/6 checks)" in ls)
    entries = list((tmp_path / ".stitch" / "cache").rglob("*.json"))
    assert entries
    for entry in entries:
        entry.write_bytes(entry.read_bytes()[:40])  # a write cut short
    async with running_server(tmp_path, capabilities=pull_capabilities(), settings=SETTINGS,
                              initialization_options=TRUSTED, env=env(tmp_path)) as client:
        uri = open_doc(client, cu)
        save_doc(client, uri)
        await hint_labels_until(client, uri, lambda ls: "✓ correct (6/6 checks)" in ls)
    assert [r["event"] for r in runs(tmp_path)] == ["start", "end", "start", "end"], "the corrupt entry was re-verified"
    assert all(e.read_text().endswith("}") for e in (tmp_path / ".stitch" / "cache").rglob("*.json"))


async def test_withdrawing_trust_stops_running_jobs(tmp_path):
    cu = workspace(tmp_path)
    async with running_server(tmp_path, capabilities=pull_capabilities(), settings=SETTINGS,
                              initialization_options=TRUSTED, env=env(tmp_path, 60)) as client:
        uri = open_doc(client, cu)
        save_doc(client, uri)
        started = await wait_until(lambda: [r for r in runs(tmp_path) if r["event"] == "start"], 60, "the worker to start")
        client.protocol.notify("stitch/setTrusted", {"trusted": False})
        await wait_until(lambda: not pid_alive(started[0]["pid"]), 20, "the worker to be gone")
        await hint_labels_until(client, uri, lambda ls: "verification off: workspace not trusted" in ls)


async def test_pairing_from_pyproject_toml(tmp_path):
    cu = workspace(tmp_path, CU.replace("// stitch: reference=ref/gelu_ref.py\n", ""))
    (tmp_path / "pyproject.toml").write_text(textwrap.dedent(
        """\
        [tool.stitch]
        cacheMaxMb = 64

        [[tool.stitch.pair]]
        kernel = "gelu.cu:fused_gelu_scale"
        reference = "ref/gelu_ref.py"
        launch = "block=128 args=x, out, x.numel()"
        """
    ))
    async with running_server(tmp_path, capabilities=pull_capabilities(), settings=SETTINGS,
                              initialization_options=TRUSTED, env=env(tmp_path)) as client:
        uri = open_doc(client, cu)
        save_doc(client, uri)
        await hint_labels_until(client, uri, lambda ls: "✓ correct (6/6 checks)" in ls)
        assert not any("ignored setting 'pair'" in m.message for m in client.log_messages)


async def test_closing_the_document_cancels_its_job(tmp_path):
    cu = workspace(tmp_path)
    async with running_server(tmp_path, capabilities=pull_capabilities(), settings=SETTINGS,
                              initialization_options=TRUSTED, env=env(tmp_path, 60)) as client:
        uri = open_doc(client, cu)
        save_doc(client, uri)
        started = await wait_until(lambda: [r for r in runs(tmp_path) if r["event"] == "start"], 60, "the worker to start")
        token, _ = await wait_until(lambda: progress_of(client, "Verify fused_gelu_scale"), 30, "progress to begin")
        client.text_document_did_close(lsp.DidCloseTextDocumentParams(text_document=lsp.TextDocumentIdentifier(uri=uri)))
        await wait_until(lambda: isinstance(client.progress_reports[token][-1], lsp.WorkDoneProgressEnd), 30, "progress to end")
        assert client.progress_reports[token][-1].message == "cancelled: the document was closed"
        await wait_until(lambda: not pid_alive(started[0]["pid"]), 20, "the worker to be gone")


@pytest.mark.nvcc
async def test_hover_at_a_launch_site_carries_the_ptxas_figures(tmp_path):
    cu = workspace(tmp_path)
    async with running_server(tmp_path, capabilities=pull_capabilities(), settings={"onSave": {"compile": True, "verify": False}},
                              initialization_options=TRUSTED, env=env(tmp_path)) as client:
        uri = open_doc(client, cu)
        save_doc(client, uri)
        await hint_labels_until(client, uri, lambda ls: any("regs" in label for label in ls), timeout=120)
        card = await hover(client, uri, LAUNCH_LINE, 6)
        assert "#### `fused_gelu_scale`" in card and "registers / thread" in card
        assert "Not profiled yet" in card and "stitch verify-kernel gelu.cu:fused_gelu_scale --profile" in card
