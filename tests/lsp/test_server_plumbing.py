"""Small pieces of the server's plumbing: reading stdin, the log's flood limit, request timing."""

from __future__ import annotations

import asyncio
import json
import logging
import os
from concurrent.futures import ThreadPoolExecutor
from types import SimpleNamespace

import pytest

from stitch_lsp.lsp.framing import chunks_of
from stitch_lsp.lsp.log_flood import FloodFilter
from stitch_lsp.lsp.request_timing import RequestTiming


class NoThreads:
    def submit(self, *args, **kwargs):
        raise AssertionError("a pipe is read on the event loop, not in a thread")


def test_a_pipe_is_read_on_the_event_loop_itself(tmp_path):
    read_fd, write_fd = os.pipe()

    async def main():
        with os.fdopen(read_fd, "rb", buffering=0) as stdin:
            read_chunk = chunks_of(stdin, NoThreads())
            os.write(write_fd, b"Content-Length: 2\r\n\r\n{}")
            first = await read_chunk()
            os.close(write_fd)
            return first, await read_chunk()

    assert asyncio.run(main()) == (b"Content-Length: 2\r\n\r\n{}", b"")


def test_a_regular_file_is_read_in_a_thread(tmp_path):
    path = tmp_path / "input"
    path.write_bytes(b"Content-Length: 2\r\n\r\n{}")

    async def main():
        with open(path, "rb", buffering=0) as stdin, ThreadPoolExecutor(1) as pool:
            read_chunk = chunks_of(stdin, pool)
            return await read_chunk(), await read_chunk()

    assert asyncio.run(main()) == (b"Content-Length: 2\r\n\r\n{}", b"")


def test_a_terminal_is_read_in_a_thread_and_stays_blocking():
    controller, terminal = os.openpty()
    submitted = []

    class Recording(ThreadPoolExecutor):
        def submit(self, fn, *args, **kwargs):
            submitted.append(fn)
            return super().submit(fn, *args, **kwargs)

    async def main():
        with os.fdopen(terminal, "rb", buffering=0) as stdin, Recording(1) as pool:
            read_chunk = chunks_of(stdin, pool)
            os.write(controller, b"{}\n")
            chunk = await read_chunk()
            return chunk, os.get_blocking(terminal)

    try:
        chunk, blocking = asyncio.run(main())
    finally:
        os.close(controller)
    assert chunk == b"{}\n" and submitted
    assert blocking  # the user's shell gets its terminal back as it was


def test_a_flood_of_one_log_line_is_cut_short_and_counted():
    flood = FloodFilter(burst=3, window=60.0)
    records = [logging.LogRecord("stitch_lsp.lsp.framing", logging.WARNING, __file__, 1,
                                 "not a JSON-RPC message (%s)", (n,), None) for n in range(10)]
    passed = [r for r in records if flood.filter(r)]
    assert [r.getMessage() for r in passed] == [f"not a JSON-RPC message ({n})" for n in range(3)]
    other = logging.LogRecord("stitch_lsp.lsp.framing", logging.WARNING, __file__, 1, "something else", (), None)
    assert flood.filter(other)  # a different line is not held back
    flood.window = 0.0  # the window is over: the next one says how many were left out
    late = logging.LogRecord("stitch_lsp.lsp.framing", logging.WARNING, __file__, 1,
                             "not a JSON-RPC message (%s)", (99,), None)
    assert flood.filter(late)
    assert late.getMessage() == "not a JSON-RPC message (99) [7 more like this not logged]"


def test_request_timing_notes_answers_to_timed_requests_only(tmp_path):
    path = tmp_path / "timing.jsonl"
    timing = RequestTiming(str(path))
    sent = []
    send = timing.wrap_send(sent.append)
    timing.started(7, "textDocument/hover", 1.0)
    send(SimpleNamespace(id=3, method="workspace/configuration"))  # the server's own request
    send(SimpleNamespace(id=7, result=None))
    send(SimpleNamespace(id=8, result=None))  # never started: not timed
    assert len(sent) == 3
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [(d["id"], d["method"], d["read"]) for d in lines] == [(7, "textDocument/hover", 1.0)]
    assert lines[0]["read"] <= lines[0]["started"] <= lines[0]["answered"]


@pytest.mark.timeout(30)  # a blocking write would hang here, not fail
def test_a_client_slow_to_read_does_not_stop_the_loop_and_gets_every_byte_in_order():
    from stitch_lsp.lsp.outbox import loop_writer

    read_fd, write_fd = os.pipe()
    messages = [b"%06d" % n + b"x" * 994 for n in range(300)]  # 300 KB: several times what a pipe holds

    async def main():
        with os.fdopen(write_fd, "wb", buffering=0) as stdout:
            writer = await loop_writer(stdout, lambda: None)
            assert writer is not None
            for m in messages:
                writer.write(m)  # nobody reads yet: a blocking write would hang here
            ticks = 0
            for _ in range(5):  # the loop goes on with other work meanwhile
                await asyncio.sleep(0)
                ticks += 1
            reading = asyncio.get_running_loop().run_in_executor(None, _read_all, read_fd, len(b"".join(messages)))
            await writer.finish()
            return ticks, await reading, os.get_blocking(write_fd)

    ticks, received, blocking = asyncio.run(main())
    os.close(read_fd)
    assert ticks == 5
    assert received == b"".join(messages)
    assert blocking  # stdout is handed back blocking for what is written after the loop


def _read_all(fd: int, n: int) -> bytes:
    out = b""
    while len(out) < n:
        chunk = os.read(fd, 65536)
        if not chunk:
            break
        out += chunk
    return out
