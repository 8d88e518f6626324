"""Which queued message the server handles next (``stitch_lsp/lsp/inbox.py``).

A read-only request goes ahead of queued traffic that cannot change its answer;
nothing else changes order, and every message comes out exactly once.
"""

from __future__ import annotations

from stitch_lsp.lsp.inbox import Inbox


def change(uri: str, version: int) -> dict:
    return {"jsonrpc": "2.0", "method": "textDocument/didChange",
            "params": {"textDocument": {"uri": uri, "version": version}, "contentChanges": [{"text": "x"}]}}


def request(msg_id: int, method: str, uri: str | None = None) -> dict:
    params = {"textDocument": {"uri": uri}, "position": {"line": 0, "character": 0}} if uri else {}
    return {"jsonrpc": "2.0", "id": msg_id, "method": method, "params": params}


def drain(inbox: Inbox) -> list[dict]:
    out = []
    while (item := inbox.take()) is not None:
        out.append(item.raw)
    return out


def label(raw: dict) -> str:
    if "id" in raw and "method" in raw:
        return f"{raw['method'].split('/')[-1]}#{raw['id']}"
    if "method" in raw:
        return f"{raw['method'].split('/')[-1]}:{raw['params']['textDocument']['version']}" \
            if raw["method"] == "textDocument/didChange" else raw["method"]
    return f"answer#{raw['id']}"


def test_a_hover_goes_ahead_of_a_burst_about_other_documents():
    inbox = Inbox()
    burst = []
    for v in range(2, 50):
        burst += [change("file:///w/doc.cu", v), request(v, "textDocument/inlayHint", "file:///w/doc.cu")]
    for raw in burst:
        inbox.put(raw, 0.0)
    inbox.put(request(1000, "textDocument/hover", "file:///w/ref.cu"), 0.0)
    order = [label(r) for r in drain(inbox)]
    assert order[0] == "hover#1000"
    assert order[1:] == [label(r) for r in burst]  # the rest as it came


def test_a_request_never_passes_a_change_to_its_own_document():
    inbox = Inbox()
    inbox.put(change("file:///w/other.cu", 2), 0.0)
    inbox.put(change("file:///w/a%20b.cu", 2), 0.0)
    # The same document under another spelling of its URI (pygls unquotes them).
    inbox.put(request(7, "textDocument/hover", "file:///w/a b.cu"), 0.0)
    assert [label(r) for r in drain(inbox)] == ["didChange:2", "didChange:2", "hover#7"]


def test_nothing_passes_what_changes_every_answer():
    for barrier in (
        {"jsonrpc": "2.0", "method": "workspace/didChangeConfiguration", "params": {"settings": {}}},
        {"jsonrpc": "2.0", "id": 3, "method": "workspace/executeCommand", "params": {"command": "stitch.fuse"}},
        {"jsonrpc": "2.0", "id": 4, "result": [{"trusted": True}]},  # the client's answer to our request
        {"jsonrpc": "2.0", "method": "stitch/somethingNew", "params": {}},
    ):
        inbox = Inbox()
        inbox.put(change("file:///w/other.cu", 2), 0.0)
        inbox.put(barrier, 0.0)
        inbox.put(request(9, "textDocument/hover", "file:///w/ref.cu"), 0.0)
        out = drain(inbox)
        assert out[1] is barrier and label(out[2]) == "hover#9", barrier


def test_cancellations_do_not_hold_reads_back_and_reads_do_not_pass_each_other_needlessly():
    inbox = Inbox()
    inbox.put(change("file:///w/doc.cu", 2), 0.0)
    inbox.put({"jsonrpc": "2.0", "method": "$/cancelRequest", "params": {"id": 1}}, 0.0)
    inbox.put(request(5, "textDocument/inlayHint", "file:///w/ref.cu"), 0.0)
    inbox.put(request(6, "stitch/serverInfo"), 0.0)
    assert [label(r) for r in drain(inbox)] == ["inlayHint#5", "serverInfo#6", "didChange:2", "$/cancelRequest"]


def test_with_nothing_queued_a_read_is_simply_next():
    inbox = Inbox()
    inbox.put(request(1, "textDocument/hover", "file:///w/ref.cu"), 0.0)
    item = inbox.take()
    assert item is not None and not item.ahead
    assert inbox.take() is None and len(inbox) == 0
