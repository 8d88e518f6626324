"""When each request arrived and when it was answered, for benchmarks that split latency.

A client sees one figure per request: its own send, the pipe, the server, the pipe
back and its own reading. With ``STITCH_REQUEST_TIMING=<file>`` in the server's
environment, the server appends one JSON line per answered request to that file:
``{"id", "method", "read", "started", "answered"}`` in ``time.monotonic()`` seconds
(the same clock as the client's on Linux), where ``read`` is when the bytes holding
the request reached the event loop, ``started`` when the loop began on it and
``answered`` when the answer was written. Off by default: nothing is recorded.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any, Callable

ENV = "STITCH_REQUEST_TIMING"


class RequestTiming:
    def __init__(self, path: str) -> None:
        self._out = open(path, "a", encoding="utf-8", buffering=1)
        self._open: dict[Any, tuple[str, float, float]] = {}

    def started(self, msg_id: Any, method: str, read_at: float) -> None:
        self._open[msg_id] = (method, read_at, time.monotonic())

    def wrap_send(self, send: Callable[[Any], None]) -> Callable[[Any], None]:
        """``send`` that notes the time an answer to a timed request went out."""

        def timed_send(data: Any) -> None:
            send(data)
            if getattr(data, "method", None) is not None:
                return  # the server's own request to the client
            msg_id = getattr(data, "id", None)
            entry = self._open.pop(msg_id, None) if isinstance(msg_id, (str, int)) else None
            if entry is not None:
                method, read_at, started_at = entry
                self._out.write(json.dumps({"id": msg_id, "method": method, "read": read_at,
                                            "started": started_at, "answered": time.monotonic()}) + "\n")

        return timed_send


def from_environment() -> RequestTiming | None:
    path = os.environ.get(ENV)
    return RequestTiming(path) if path else None
