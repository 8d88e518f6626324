"""Cancellation and progress, as plain objects every layer can take.

A job owns one ``CancelToken``; whatever the job runs (a worker, nvcc, ncu)
registers a callback that kills its process tree. Cancelling is normal, not an
error: code that notices it raises ``Cancelled`` and the job ends "cancelled".
"""

from __future__ import annotations

import threading
from typing import Callable

from attrs import frozen


class Cancelled(Exception):
    """Raised by work that noticed its token was cancelled."""


class CancelToken:
    def __init__(self) -> None:
        self._event = threading.Event()
        self._lock = threading.Lock()
        self._callbacks: list[Callable[[], None]] = []
        self.reason = ""

    @property
    def cancelled(self) -> bool:
        return self._event.is_set()

    def cancel(self, reason: str = "cancelled") -> None:
        with self._lock:
            if self._event.is_set():
                return
            self.reason = reason
            self._event.set()
            callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            try:
                callback()
            except Exception:  # a failing kill must not stop the others
                pass

    def on_cancel(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Run ``callback`` on cancel (at once if already cancelled). Returns an unregister function."""
        with self._lock:
            if not self._event.is_set():
                self._callbacks.append(callback)

                def unregister() -> None:
                    with self._lock:
                        if callback in self._callbacks:
                            self._callbacks.remove(callback)

                return unregister
        callback()
        return lambda: None

    def raise_if_cancelled(self) -> None:
        if self._event.is_set():
            raise Cancelled(self.reason)

    def wait(self, timeout: float | None = None) -> bool:
        return self._event.wait(timeout)


@frozen
class ProgressEvent:
    """A stage of a job: "planning", "generating", "compiling", "checking", "timing", "profiling", ..."""

    stage: str
    message: str = ""
    percent: int | None = None  # 0..100 where known


Reporter = Callable[[ProgressEvent], None]


def no_report(_: ProgressEvent) -> None:
    return None
