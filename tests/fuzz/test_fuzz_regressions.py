"""What the fuzz suite found, kept as plain tests; and the documents too big to draw at random.

Each test drives the real server over stdio with the raw wire client, then checks
the server still answers a hover on a known kernel correctly.
"""

from __future__ import annotations

import time

import pytest

from tests.fuzz.driver import KERNEL, FuzzSession
from tests.fuzz.wire import frame


@pytest.fixture(scope="module")
def session(tmp_path_factory):
    s = FuzzSession(tmp_path_factory.mktemp("regressions"))
    yield s
    assert s.close() == 0
    assert s.internal_errors == []


def hover_request(session, msg_id):
    return (b'{"jsonrpc":"2.0","id":%d,"method":"textDocument/hover","params":{"textDocument":{"uri":"%s"},'
            b'"position":{"line":0,"character":17}}}' % (msg_id, session.ref_uri.encode()))


def test_a_frame_with_a_short_content_length_costs_one_message(session):
    """Found: the rest of the cut body ran into the next header, and the server never heard another message."""
    body = b'{"jsonrpc":"2.0","method":"textDocument/didChange","params":{}}'
    session.client.send_raw(frame(body, 10) + frame(hover_request(session, 901)))
    assert "`scale`" in session._answer(901)["result"]["contents"]["value"]


def test_a_frame_with_a_long_content_length_gives_back_what_it_swallowed(session):
    body = b'{"jsonrpc":"2.0","method":"$/cancelRequest","params":{"id":1}}'
    swallowed = frame(hover_request(session, 902))
    # Too long by half the next frame: it ends inside that frame's header.
    session.client.send_raw(frame(body, len(body) + 9) + swallowed + frame(hover_request(session, 903)))
    for msg_id in (902, 903):
        assert "`scale`" in session._answer(msg_id)["result"]["contents"]["value"]


def test_a_zero_content_length_does_not_end_the_session(session):
    """Found: an empty body read as the end of input, and the server exited."""
    session.client.send_raw(frame(b"") + frame(hover_request(session, 904)))
    assert session._answer(904)["result"] is not None
    assert session.client.proc.poll() is None


def test_requests_that_are_not_understood_get_an_answer(session):
    """Found: a request whose params did not fit was logged and never answered (the client waited forever)."""
    c = session.client
    c.send_raw(frame(b'{"jsonrpc":"2.0","id":905,"method":"textDocument/hover","params":{"position":6727}}'))
    assert c.wait(905, 10)["error"]["code"] == -32602
    c.send_raw(frame(b'{"jsonrpc":"2.0","id":{"a":1},"method":"textDocument/hover"}'))
    c.send_raw(frame(b'[1, 2]') + frame(b'{"jsonrpc": 1}x'))
    session.check_hover()


def test_a_change_to_a_document_that_is_not_open_is_not_an_internal_error(session):
    """Found: didChange for an unopened URI raised KeyError inside pygls: an "internal error" pop-up."""
    for uri in ("file://host/share/k.cu", "file:///nonexistent/x.cu", "http://example.invalid/k.cu", ""):
        session.client.notify("textDocument/didChange",
                              {"textDocument": {"uri": uri, "version": 2}, "contentChanges": [{"text": "x"}]})
    session.check_hover()
    assert session.internal_errors == []


HUGE = {
    "one 1 MB line (.cu)": ("cuda", "__global__ void k(float* y) { " + "y[0] = 1.0f; " * 75_000 + "}\n"),
    "50,000 lines (.cu)": ("cuda", "".join(KERNEL.replace("scale", f"scale_{i}") for i in range(12_500))),
    "a long operator chain (.cu)": ("cuda", "__global__ void k(float* y) { y[0] = " + "1.0f + " * 2_000 + "0.0f; }\n"),
    "deep nesting (.cu)": ("cuda", "__global__ void k(float* y) " + "{" * 20_000 + "}" * 20_000 + "\n"),
    "deep nesting (.py)": ("python", "import torch\ny = " + "(" * 20_000 + "x" + ")" * 20_000 + "\n"),
    "one 1 MB line (.py)": ("python", "import torch\ny = x" + " + x" * 250_000 + "\n"),
    "50,000 lines (.py)": ("python", "import torch\n" + "y = torch.relu(x) * 2.0\n" * 50_000),
    "binary (.cu)": ("cuda", bytes(range(256)).decode("latin-1") * 2000),
}


@pytest.mark.timeout(300)
@pytest.mark.parametrize("name", list(HUGE))
def test_huge_and_odd_documents_get_answers(session, name):
    language, text = HUGE[name]
    suffix = "cu" if language == "cuda" else "py"
    path = session.root / f"huge_{len(session.hover_ms)}.{suffix}"
    start = time.monotonic()
    uri = session.client.open(path, text, language="cuda-cpp" if language == "cuda" else "python")
    owed = session._probe(uri, (1, 3))
    # An edit in the middle, then the requests again.
    session.client.notify("textDocument/didChange", {"textDocument": {"uri": uri, "version": 2}, "contentChanges": [
        {"range": {"start": {"line": 0, "character": 5}, "end": {"line": 0, "character": 9}}, "text": "{(\ud800"}]})
    owed += session._probe(uri, (0, 7))
    for msg_id in owed:
        # Analysing 2 MB of CUDA takes seconds on a small machine; an answer is owed all the same.
        answer = session._answer(msg_id, 60.0)
        assert "result" in answer or answer["error"]["code"] == -32800, answer
    session.client.notify("textDocument/didClose", {"textDocument": {"uri": uri}})
    session.check_hover()
    assert time.monotonic() - start < 60
