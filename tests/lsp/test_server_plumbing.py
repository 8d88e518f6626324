"""Small pieces of the server's plumbing: reading stdin, the log's flood limit, request timing."""

from __future__ import annotations

import asyncio
import json
import logging
import os
from concurrent.futures import ThreadPoolExecutor
from types import SimpleNamespace

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
