"""A ``workspace/*/refresh`` request, sent once for a burst of changes and only to clients that support it."""

from __future__ import annotations

import logging
from typing import Any, Callable

log = logging.getLogger(__name__)


class CoalescedRefresh:
    def __init__(self, server: Any, capability: str, send: Callable[[], Any], what: str) -> None:
        self._server = server
        self._capability = capability  # dotted client capability, e.g. "workspace.inlay_hint.refresh_support"
        self._send = send
        self._what = what
        self._scheduled = False

    def schedule(self) -> None:
        if self._scheduled or not self._server.client_supports(self._capability):
            return
        self._scheduled = True

        def send() -> None:
            self._scheduled = False
            try:
                self._send()
            except Exception:
                log.exception("%s failed", self._what)

        # Several sources set at once (rules, nvcc, a verdict): one refresh for all of them.
        self._server.call_soon(send, delay=0.02)
