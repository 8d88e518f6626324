"""The CUDA analysis of each open document, cached by document version.

Hover and code-action providers call ``server.cuda.get(uri)``: it answers from
the cache when the static-rules pass already analysed this version, else it
analyses now. Text that is not worth analysing (binary, enormous) gives None.
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from stitch_lsp.lsp.server import StitchServer

log = logging.getLogger(__name__)

# Above this size a request never analyses on the event loop: it answers from the last
# analysis (a few keystrokes old at most) while the background pass catches up.
SYNC_ANALYSIS_MAX_CHARS = 300_000

# Beyond this a document is not parsed (a generated or data file opened by mistake);
# a 100,000-line kernel file is about 4 MB and is still analysed.
MAX_ANALYSIS_CHARS = 16_000_000


def unfit_reason(text: str) -> str | None:
    """Why ``text`` is not analysed, or None when it is."""
    if "\x00" in text:
        return "it looks like a binary file"
    if len(text) > MAX_ANALYSIS_CHARS:
        return f"it is larger than {MAX_ANALYSIS_CHARS // 1_000_000} MB"
    return None


def analyze_text(text: str, path: str) -> Any:
    """``analyze_cuda(text, path)``, or None when the text is not fit for analysis."""
    if unfit_reason(text) is not None:
        return None
    try:
        from stitch_lsp.analysis.cuda_analysis import analyze_cuda
    except ModuleNotFoundError as exc:
        if exc.name != "stitch_lsp.analysis.cuda_analysis":
            raise
        log.warning("CUDA analysis is not installed; static rules are off")
        return None
    return analyze_cuda(text, path)


class CudaDocuments:
    def __init__(self, server: "StitchServer") -> None:
        self._server = server
        self._cache: dict[str, tuple[int | None, Any]] = {}
        self._lock = threading.Lock()

    def cached(self, uri: str, version: int | None) -> tuple[bool, Any]:
        with self._lock:
            entry = self._cache.get(uri)
        if entry is not None and entry[0] == version:
            return True, entry[1]
        return False, None

    def store(self, uri: str, version: int | None, analysis: Any) -> None:
        with self._lock:
            current = self._cache.get(uri)
            # Never replace a newer version's analysis with an older one.
            if current is not None and current[0] is not None and version is not None and current[0] > version:
                return
            self._cache[uri] = (version, analysis)

    def forget(self, uri: str) -> None:
        with self._lock:
            self._cache.pop(uri, None)

    def get(self, uri: str) -> Any:
        """The CudaAnalysis of the open document (None if not open / not fit / not yet analysed).

        Small documents are analysed now if the cache is behind. A big one is never
        analysed here (this runs on the event loop): the last analysis is returned,
        possibly for an older version, and the static-rules pass brings it up to date.
        """
        doc = self._server.document(uri)
        if doc is None or not self._server.is_cuda(uri):
            return None
        hit, analysis = self.cached(uri, doc.version)
        if hit:
            return analysis
        version, text = doc.version, doc.source
        if len(text) > SYNC_ANALYSIS_MAX_CHARS:
            with self._lock:
                entry = self._cache.get(uri)
            return entry[1] if entry is not None else None
        analysis = analyze_text(text, self._server.path_of(uri))
        self.store(uri, version, analysis)
        return analysis
