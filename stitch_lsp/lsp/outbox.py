"""Messages to the client written without holding up the event loop.

pygls' ``StdoutWriter`` writes and flushes each message with a blocking write. When
the client is slow to read (busy, or waiting for a CPU on a loaded machine) and the
pipe's buffer is full, the whole event loop stops until the client drains it, and
with it the reading and answering of every other message: under the fuzz benchmark
a quarter of the loop's time went there. Where stdout is a pipe or socket it is
written here through the loop's own transport instead: what the pipe cannot take
now is kept, in order, and written as the client reads. Past ``HIGH_WATER`` bytes
kept, the server stops reading new messages until the client catches up (the
backpressure the blocking write gave, without stopping the loop). A file or a
terminal keeps pygls' writer.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from typing import Any, Callable

log = logging.getLogger(__name__)

HIGH_WATER = 16 * 1024 * 1024


class _Flow(asyncio.Protocol):
    def __init__(self, on_lost: Callable[[], None]) -> None:
        self.room = asyncio.Event()
        self.room.set()
        self.lost = False
        self.closing = False
        self._on_lost = on_lost

    def pause_writing(self) -> None:
        self.room.clear()

    def resume_writing(self) -> None:
        self.room.set()

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        self.room.set()  # nothing waits on a client that is gone
        if self.closing:
            return
        log.error("the connection to the client is lost (%s); shutting down", exc or "closed")
        self._on_lost()


class LoopWriter:
    """pygls' writer interface over the event loop's write transport for stdout."""

    def __init__(self, loop: asyncio.AbstractEventLoop, transport: asyncio.WriteTransport, flow: _Flow,
                 fd: int) -> None:
        self._loop = loop
        self._fd = fd
        self._transport = transport
        self._flow = flow
        self._loop_thread = threading.get_ident()

    def write(self, data: bytes) -> None:
        if threading.get_ident() == self._loop_thread:
            self._transport.write(data)
        else:  # a transport is not thread-safe; the order of one thread's messages is kept
            self._loop.call_soon_threadsafe(self._transport.write, data)

    def close(self) -> None:
        self._flow.closing = True
        self._transport.close()

    async def finish(self, timeout: float = 5.0) -> None:
        """Write out what is kept (for ``timeout`` at most: a client that stopped reading is gone),
        then give stdout back as it was: blocking, for whatever is written after the loop."""
        deadline = self._loop.time() + timeout
        while self._transport.get_write_buffer_size() and not self._flow.lost and self._loop.time() < deadline:
            await asyncio.sleep(0.01)
        self.close()
        try:
            os.set_blocking(self._fd, True)
        except OSError:
            pass

    async def room(self) -> None:
        """Return once fewer than ``HIGH_WATER`` bytes wait for the client to read them."""
        await self._flow.room.wait()


async def loop_writer(stdout: Any, on_lost: Callable[[], None]) -> LoopWriter | None:
    """A ``LoopWriter`` for ``stdout``, or None where the loop cannot write it (a file, a terminal:
    the loop would make a terminal non-blocking, and that outlasts the server in the user's shell)."""
    try:
        fd = stdout.fileno()
    except (AttributeError, OSError, ValueError):
        return None
    if os.isatty(fd):
        return None
    loop = asyncio.get_running_loop()
    # The transport owns a duplicate: closing it leaves stdout itself open for what comes after.
    pipe = os.fdopen(os.dup(fd), "wb", buffering=0)
    try:
        transport, flow = await loop.connect_write_pipe(lambda: _Flow(on_lost), pipe)
    except (ValueError, OSError, NotImplementedError) as exc:
        log.debug("writing stdout with blocking writes: %s", exc)
        pipe.close()
        os.set_blocking(fd, True)
        return None
    transport.set_write_buffer_limits(high=HIGH_WATER)
    return LoopWriter(loop, transport, flow, fd)
