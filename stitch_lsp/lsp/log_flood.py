"""A limit on how often the same log line is written, so a flood of bad input costs no disk.

A client that sends thousands of malformed messages would otherwise have each one
formatted and written to the server log (by the framing and by pygls), which on a
busy machine is a good part of what each message costs. The same message template
from the same logger at the same level is written at most ``burst`` times per
``window`` seconds; the first one written after a quiet spell says how many were
left out.
"""

from __future__ import annotations

import logging
import time


class FloodFilter(logging.Filter):
    def __init__(self, burst: int = 20, window: float = 60.0) -> None:
        super().__init__()
        self.burst = burst
        self.window = window
        self._seen: dict[tuple[str, int, str], list[float | int]] = {}  # key -> [window start, written, left out]

    def filter(self, record: logging.LogRecord) -> bool:
        key = (record.name, record.levelno, str(record.msg))
        now = time.monotonic()
        entry = self._seen.get(key)
        if entry is None or now - entry[0] > self.window:
            left_out = int(entry[2]) if entry is not None else 0
            self._seen[key] = [now, 1, 0]
            if left_out:
                record.msg = f"{record.getMessage()} [{left_out} more like this not logged]"
                record.args = None
            if len(self._seen) > 10_000:  # templates are few; this only guards against odd callers
                self._seen.clear()
            return True
        if entry[1] < self.burst:
            entry[1] += 1
            return True
        entry[2] += 1
        return False
