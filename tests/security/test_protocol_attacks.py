"""Frames an attacker (or a broken client) can send: what held in the attack run, kept as tests.
The wider fuzzing is in tests/fuzz/; these are the cases the security review named."""

from __future__ import annotations

import pytest

from tests.fuzz.driver import FuzzSession
from tests.fuzz.test_fuzz_regressions import hover_request
from tests.fuzz.wire import frame


@pytest.fixture(scope="module")
def session(tmp_path_factory):
    s = FuzzSession(tmp_path_factory.mktemp("protocol-attacks"))
    yield s
    assert s.close() == 0
    assert s.internal_errors == []


@pytest.mark.parametrize("length", [10**15, 2**63, 256 * 1024 * 1024 + 1])
def test_a_huge_content_length_neither_stalls_nor_kills_the_server(session, length):
    body = b'{"jsonrpc":"2.0","method":"$/cancelRequest","params":{"id":1}}'
    msg_id = 950 + len(str(length))
    session.client.send_raw(frame(body, length) + frame(hover_request(session, msg_id)))
    assert "`scale`" in session._answer(msg_id, within=10)["result"]["contents"]["value"]
    assert session.client.proc.poll() is None


def test_a_negative_or_garbage_content_length_is_skipped(session):
    session.client.send_raw(b"Content-Length: -5\r\n\r\nxx" + b"Content-Length: abc\r\n\r\n"
                            + frame(hover_request(session, 960)))
    assert "`scale`" in session._answer(960, within=10)["result"]["contents"]["value"]
