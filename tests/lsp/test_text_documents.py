"""Incremental edits applied by offsets agree with pygls' own line-by-line rebuild."""

from __future__ import annotations

import random

from lsprotocol import types as lsp
from pygls.workspace import TextDocument

from stitch_lsp.lsp.text_documents import StitchTextDocument, split_lines


def change(sl, sc, el, ec, text):
    return lsp.TextDocumentContentChangePartial(
        range=lsp.Range(start=lsp.Position(line=sl, character=sc), end=lsp.Position(line=el, character=ec)), text=text
    )


def test_random_edits_match_pygls():
    rng = random.Random(7)
    text = "".join(f"line {i} αβ 😀 x\n" if i % 3 else f"line {i}\r\n" for i in range(200))
    ours, theirs = StitchTextDocument("file:///a.cu", text), TextDocument("file:///a.cu", text)
    for _ in range(300):
        lines = theirs.lines
        sl = rng.randrange(len(lines))
        el = min(len(lines) - 1, sl + rng.randrange(3))

        def valid_column(n):
            # A position the editor could send: inside the line, in UTF-16 units, not inside a surrogate pair.
            body = lines[n].rstrip("\r\n")
            cut = rng.randrange(len(body) + 1)
            return len(body[:cut].encode("utf-16-le")) // 2

        sc, ec = valid_column(sl), valid_column(el)
        if el == sl and ec < sc:
            sc, ec = ec, sc
        edit = change(sl, sc, el, ec, rng.choice(["", "q", "new\n", "é\r\n", "😀"]))
        ours.apply_change(edit)
        theirs.apply_change(edit)
        assert ours.source == theirs.source


def test_lines_split_only_at_lsp_line_ends():
    assert split_lines("a\x0cb\nc\rd\r\ne") == ["a\x0cb\n", "c\r", "d\r\n", "e"]
    assert split_lines("a\nb\n") == ["a\n", "b\n"]


def test_stores_accept_results_from_other_threads():
    import asyncio
    import threading

    from stitch_lsp.findings import Finding, Hint, Position, Range, Severity
    from stitch_lsp.lsp.server import StitchServer

    server = StitchServer()
    published = []
    server.diagnostics.publish = lambda uri: published.append((uri, threading.current_thread().name))

    async def scenario():
        server.loop = asyncio.get_running_loop()
        finding = Finding("k.cu", Range(Position(0, 0), Position(0, 1)), Severity.WARNING, "X", "m")
        worker = threading.Thread(target=lambda: server.diagnostics.set("file:///k.cu", "verify", [finding]), name="w")
        worker.start()
        worker.join()
        threading.Thread(target=lambda: server.hints.set("file:///k.cu", "verify", [Hint("k.cu", Position(0, 0), "x")])).start()
        await asyncio.sleep(0.1)

    asyncio.run(scenario())
    assert published == [("file:///k.cu", threading.main_thread().name)]
    assert [h.label for h in server.hints.get("file:///k.cu")] == ["x"]
