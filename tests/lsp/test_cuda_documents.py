"""One analysis per document text, off the event loop, shared by every request (``CudaDocuments``).

A stand-in server holds the open documents; the analysis itself is replaced by
one that records which texts it was asked for and can be held back, so the tests
decide what is running when.
"""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from stitch_lsp.lsp import cuda_documents
from stitch_lsp.lsp.cuda_documents import WAIT_MAX_CHARS, CudaDocuments

URI = "file:///w/k.cu"


class Doc:
    def __init__(self, source: str, version: int) -> None:
        self.source, self.version = source, version


class Server:
    def __init__(self) -> None:
        self.docs: dict[str, Doc] = {}
        self.analysis_pool = ThreadPoolExecutor(1)

    def document(self, uri: str) -> Doc | None:
        return self.docs.get(uri)

    @staticmethod
    def is_cuda(uri: str) -> bool:
        return uri.endswith(".cu")

    @staticmethod
    def path_of(uri: str) -> str:
        return uri

    def edit(self, uri: str, text: str) -> None:
        old = self.docs.get(uri)
        self.docs[uri] = Doc(text, old.version + 1 if old else 1)


class Analyses:
    """Stands in for ``analyze_text``: records each text, waits while ``hold`` is clear."""

    def __init__(self) -> None:
        self.texts: list[str] = []
        self.hold = threading.Event()
        self.hold.set()
        self.started = threading.Event()

    def __call__(self, text: str, path: str) -> str:
        self.texts.append(text)
        self.started.set()
        self.hold.wait(10)
        return f"analysis of {text!r}"


@pytest.fixture
def setup(monkeypatch):
    analyses = Analyses()
    monkeypatch.setattr(cuda_documents, "analyze_text", analyses)
    server = Server()
    yield server, CudaDocuments(server), analyses  # type: ignore[arg-type]
    analyses.hold.set()
    server.analysis_pool.shutdown(wait=True)


async def started(analyses: Analyses) -> None:
    while not analyses.started.is_set():
        await asyncio.sleep(0.005)


def test_every_request_on_one_text_shares_one_analysis(setup):
    server, docs, analyses = setup
    server.edit(URI, "v1")

    async def main():
        return await asyncio.gather(docs.current(URI), docs.current(URI), docs.settle(URI, exact=True))

    hover, actions, rules = asyncio.run(main())
    assert hover == actions == rules.analysis == "analysis of 'v1'"
    assert analyses.texts == ["v1"]
    assert docs.get(URI) == "analysis of 'v1'"


def test_a_burst_of_edits_is_analysed_once_for_its_last_text(setup):
    server, docs, analyses = setup
    server.edit(URI, "v1")

    async def main():
        requests = []
        for n in range(2, 7):  # edits and requests arriving in one burst, as an editor sends them while typing
            server.edit(URI, f"v{n}")
            requests.append(asyncio.ensure_future(docs.current(URI)))
        return await asyncio.gather(*requests)

    answers = asyncio.run(main())
    # Every request is answered, from the latest text's analysis; the texts in between were never analysed.
    assert answers == ["analysis of 'v6'"] * 5
    assert analyses.texts == ["v6"]


def test_a_request_whose_text_was_superseded_before_its_turn_gets_the_newer_analysis(setup):
    server, docs, analyses = setup
    server.edit("file:///w/other.cu", "busy")
    server.edit(URI, "v1")

    async def main():
        analyses.hold.clear()
        other = asyncio.ensure_future(docs.current("file:///w/other.cu"))  # takes the only analysis thread
        await started(analyses)
        stale = asyncio.ensure_future(docs.current(URI))  # queued behind it
        await asyncio.sleep(0.05)
        server.edit(URI, "v2")
        fresh = asyncio.ensure_future(docs.current(URI))
        await asyncio.sleep(0.05)
        analyses.hold.set()
        return await asyncio.gather(other, stale, fresh)

    _, stale, fresh = asyncio.run(main())
    assert stale == fresh == "analysis of 'v2'"
    assert analyses.texts == ["busy", "v2"]  # v1 was skipped, not analysed and thrown away


def test_a_cancelled_request_leaves_the_analysis_to_the_others(setup):
    server, docs, analyses = setup
    server.edit(URI, "v1")

    async def main():
        analyses.hold.clear()
        first = asyncio.ensure_future(docs.current(URI))
        second = asyncio.ensure_future(docs.current(URI))
        await started(analyses)
        first.cancel()  # $/cancelRequest from the client
        await asyncio.sleep(0.02)
        analyses.hold.set()
        with pytest.raises(asyncio.CancelledError):
            await first
        return await second

    assert asyncio.run(main()) == "analysis of 'v1'"
    assert analyses.texts == ["v1"]


def test_get_never_analyses_and_gives_the_last_completed_analysis(setup):
    server, docs, analyses = setup
    server.edit(URI, "v1")
    assert docs.get(URI) is None and analyses.texts == []

    async def main():
        await docs.current(URI)
        server.edit(URI, "v2")
        return docs.get(URI)

    assert asyncio.run(main()) == "analysis of 'v1'"
    assert analyses.texts == ["v1"]
    assert docs.get("file:///w/closed.cu") is None


def test_a_big_document_answers_at_once_from_its_last_analysis(setup):
    server, docs, analyses = setup
    big = "x" * (WAIT_MAX_CHARS + 1)
    server.edit(URI, big)

    async def main():
        first = await docs.current(URI)  # nothing yet: answered at once, the analysis starts
        await docs.settle(URI, exact=True)
        server.edit(URI, big + "y")
        analyses.hold.clear()
        answered = await asyncio.wait_for(docs.current(URI), 1)  # the older analysis, not a wait
        analyses.hold.set()
        exact = await docs.settle(URI, exact=True)
        return first, answered, exact

    first, answered, exact = asyncio.run(main())
    assert first is None
    assert answered == f"analysis of {big!r}"
    assert exact.text == big + "y" and exact.analysis == f"analysis of {big + 'y'!r}"
