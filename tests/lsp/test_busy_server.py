"""The real server under a burst of traffic, over stdio with the raw wire client (``tests/fuzz/wire.py``).

Each burst is written in one go, as an editor replaying edits or a client gone
wrong would send it: every request in it is answered, from the analysis of the
text it was sent against or a newer one, and a request about a document the
burst does not touch does not wait for the burst.
"""

from __future__ import annotations

import json

import pytest

from tests.fuzz.driver import KERNEL
from tests.fuzz.wire import WireClient, encode


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    root = tmp_path_factory.mktemp("busy")
    (root / "ref.cu").write_text(KERNEL)
    c = WireClient(root)
    c.initialize(trusted=False)
    c.ref = c.open(root / "ref.cu", KERNEL)
    c.root_path = root
    yield c
    assert c.close() == 0


def _change(uri: str, version: int, text: str) -> dict:
    return {"jsonrpc": "2.0", "method": "textDocument/didChange",
            "params": {"textDocument": {"uri": uri, "version": version}, "contentChanges": [{"text": text}]}}


def _request(msg_id: int, method: str, params: dict) -> dict:
    return {"jsonrpc": "2.0", "id": msg_id, "method": method, "params": params}


def _hover(msg_id: int, uri: str) -> dict:
    return _request(msg_id, "textDocument/hover", {"textDocument": {"uri": uri}, "position": {"line": 0, "character": 17}})


def test_hovers_during_a_burst_of_edits_answer_from_their_text_or_a_newer_one(client):
    uri = client.open(client.root_path / "renamed.cu", KERNEL)
    burst, hovers = [], {}
    for n in range(1, 31):  # the kernel renamed on every keystroke, a hover after each
        burst.append(_change(uri, n + 1, KERNEL.replace("scale", f"scale_{n}")))
        hovers[10_000 + n] = n
        burst.append(_hover(10_000 + n, uri))
    client.send_raw(b"".join(encode(m) for m in burst), messages=len(burst))
    for msg_id, n in hovers.items():
        answer = client.wait(msg_id, 30)  # stale or not, every request gets an answer
        assert "error" not in answer, answer
        card = (answer.get("result") or {}).get("contents", {}).get("value", "")
        named = int(card.split("`scale_", 1)[1].split("`", 1)[0]) if "`scale_" in card else None
        # Never the card of an older text than the one the hover was sent against.
        assert named is not None and named >= n, (n, card[:200])
    assert "`scale_30`" in client.wait(client.request_async("textDocument/hover", _hover(0, uri)["params"]), 30)[
        "result"]["contents"]["value"]


def test_a_hover_on_another_document_does_not_wait_for_the_burst(client):
    uri = client.open(client.root_path / "busy.cu", KERNEL)
    whole = {"start": {"line": 0, "character": 0}, "end": {"line": 100, "character": 0}}
    burst = []
    for n in range(1, 301):
        burst.append(_change(uri, n + 1, KERNEL + f"// edit {n}\n"))
        burst.append(_request(20_000 + n, "textDocument/inlayHint", {"textDocument": {"uri": uri}, "range": whole}))
    burst.append(_hover(29_999, client.ref))
    order: list[object] = []
    dispatch = client._dispatch

    def recording(message):
        order.append(message.get("id"))
        dispatch(message)

    client._dispatch = recording
    try:
        client.send_raw(b"".join(encode(m) for m in burst), messages=len(burst))
        hover = client.wait(29_999, 30)
        client.wait(20_300, 30)
    finally:
        client._dispatch = dispatch
    assert "`scale`" in hover["result"]["contents"]["value"]
    # The hover was answered while the burst's requests were still being worked through.
    assert order.index(29_999) < order.index(20_300), json.dumps(order[-20:])
