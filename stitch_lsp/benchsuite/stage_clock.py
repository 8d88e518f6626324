"""Where a bench task's time goes: seconds per step, from its progress events.

Each progress event starts a step named by its stage and the words of its message
before any number or colon ("checking: trial 3 of 5" and "checking: trial 4 of 5"
add up as "checking: trial"); the step lasts until the next event. The first step,
before any event, is "setup". The suite's log and ``bench/kernelbench_goals.py``
sum them over a run to say which step to cut.
"""

from __future__ import annotations

import re
import time
from typing import Callable

from stitch_lsp.cancellation import ProgressEvent

_LABEL_END = re.compile(r"(?:^|\s)\d|[:(/]")


def step_name(event: ProgressEvent) -> str:
    label = _LABEL_END.split(event.message, 1)[0].strip().rstrip(",;-—").strip()
    return f"{event.stage}: {label}" if label else event.stage


class StageClock:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._current = "setup"
        self._since = clock()
        self.seconds: dict[str, float] = {}

    def event(self, event: ProgressEvent) -> None:
        self._switch(step_name(event))

    def _switch(self, name: str) -> None:
        now = self._clock()
        self.seconds[self._current] = self.seconds.get(self._current, 0.0) + (now - self._since)
        self._current, self._since = name, now

    def finish(self) -> dict[str, float]:
        self._switch("done")
        return {k: round(v, 3) for k, v in self.seconds.items() if v >= 0.0005}


def top_steps(seconds: dict[str, float], n: int = 3) -> str:
    """The n longest steps, for a log line: "timing: torch.compile 12.1 s, checking: trial 3.2 s"."""
    ranked = sorted(seconds.items(), key=lambda kv: -kv[1])[:n]
    return ", ".join(f"{k} {v:.1f} s" for k, v in ranked)
