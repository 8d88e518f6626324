"""Reading JSON-RPC frames from stdio so that one bad frame costs one message, not the session.

pygls' loop matches ``Content-Length`` only at the start of a header line and
trusts the length it read. A single frame whose length is too short left the rest
of its body in front of the next header, every later header then began with junk,
and the server never heard another message; one whose length was too long
swallowed the frames after it. This loop finds a header wherever a line ends with
one, puts back what a too-long frame swallowed (from the first header inside it),
and answers what cannot be a message with the JSON-RPC errors for it (-32700
parse error, -32600 invalid request) instead of an "internal error" pop-up.

It also keeps a burst of messages from holding up the rest of the server: stdin is
read on the event loop itself where it is a pipe or socket (one wake-up per burst,
not a thread hop and then a loop hop), other tasks get a turn every ``TURN_S`` of a
long burst (so requests already answered in a task are written out while the burst
is still being read), and a message that does not fit its method's parameters costs one
short log line, not pygls' formatted traceback.
"""

from __future__ import annotations

import asyncio
import contextvars
import json
import logging
import re
import threading
import time
from typing import Any, Awaitable, Callable

from stitch_lsp.lsp.inbox import Inbox, Queued
from stitch_lsp.lsp.request_timing import RequestTiming

log = logging.getLogger(__name__)

_HEADER = re.compile(rb"content-length:[ \t]*(\d+)[ \t]*\r?\n$", re.IGNORECASE)
_HEADER_INSIDE = re.compile(rb"content-length:", re.IGNORECASE)
_HEADER_LINE = re.compile(rb"content-length:[ \t]*\d+[ \t]*\r?\n", re.IGNORECASE)
# The longest the loop reads and dispatches a burst of messages before other tasks get a turn.
TURN_S = 0.002
# A body above this is not a message an editor sends (a 50 MB document would be); it is read and dropped.
MAX_BODY = 256 * 1024 * 1024


class PushbackReader:
    """Async ``readline`` / ``readexactly`` over a byte source, with bytes put back in front.

    ``read_chunk()`` returns whatever bytes are available (``b""`` at the end). One
    read serves every frame that arrived together: an editor's burst of changes and
    requests costs one hop to the reading thread, not three per message.
    """

    def __init__(self, read_chunk: Callable[[], Awaitable[bytes]]) -> None:
        self._read_chunk = read_chunk
        self._buffer = b""
        self._eof = False
        self.filled_at = 0.0  # time.monotonic() when the last bytes arrived

    def unread(self, data: bytes) -> None:
        self._buffer = data + self._buffer

    async def _fill(self) -> bool:
        if self._eof:
            return False
        chunk = await self._read_chunk()
        if not chunk:
            self._eof = True
            return False
        self._buffer += chunk
        self.filled_at = time.monotonic()
        return True

    async def readline(self) -> bytes:
        while True:
            cut = self._buffer.find(b"\n")
            if cut >= 0:
                line, self._buffer = self._buffer[: cut + 1], self._buffer[cut + 1 :]
                return line
            if not await self._fill():
                line, self._buffer = self._buffer, b""
                return line

    async def readexactly(self, n: int) -> bytes:
        while len(self._buffer) < n:
            if not await self._fill():
                break
        out, self._buffer = self._buffer[:n], self._buffer[n:]
        return out

    @property
    def at_end(self) -> bool:
        return self._eof and not self._buffer

    async def read_body(self, n: int) -> bytes:
        """Up to ``n`` bytes; less, without waiting for more, once what arrived holds the next frame's
        header (a ``Content-Length`` far too long, up to 10**15, must not hold the session until that
        much arrives). A JSON body cannot hold that header: its line breaks would be escaped."""
        searched = 1
        while len(self._buffer) < n:
            if _HEADER_LINE.search(self._buffer, searched):
                out, self._buffer = self._buffer, b""
                return out
            searched = max(1, len(self._buffer) - 32)
            if not await self._fill():
                break
        out, self._buffer = self._buffer[:n], self._buffer[n:]
        return out


def chunks_of(stdin: Any, executor: Any) -> Callable[[], Awaitable[bytes]]:
    """``read_chunk`` for a binary stream: read on the event loop where the stream is a pipe or
    socket, else ``os.read`` on its descriptor in ``executor``. A terminal is read in a thread:
    the loop would make it non-blocking, and that outlasts the server in the user's shell."""
    import os

    try:
        fd = stdin.fileno()
    except (AttributeError, OSError, ValueError):
        fd = None
    pipe: list[asyncio.StreamReader | None] = []  # filled on the first read: the loop runs by then

    def read() -> bytes:
        if fd is not None:
            return os.read(fd, 1 << 16)
        return stdin.read1(1 << 16) if hasattr(stdin, "read1") else stdin.read(1)

    async def read_chunk() -> bytes:
        if not pipe:
            pipe.append(await _pipe_reader(stdin) if fd is not None and not os.isatty(fd) else None)
        reader = pipe[0]
        if reader is not None:
            return await reader.read(1 << 16)
        return await asyncio.get_running_loop().run_in_executor(executor, read)

    return read_chunk


async def _pipe_reader(stdin: Any) -> asyncio.StreamReader | None:
    """A StreamReader fed by the event loop from ``stdin``, or None where the loop cannot watch it
    (a regular file, or a loop without pipe support)."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=1 << 20, loop=loop)
    try:
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader, loop=loop), stdin)
    except (ValueError, OSError, NotImplementedError) as exc:
        log.debug("reading stdin in a thread: %s", exc)
        return None
    return reader


def _partial_header(body: bytes) -> int:
    """How many bytes at the end of ``body`` could begin a ``Content-Length:`` header."""
    lowered = body[-16:].lower()
    for k in range(min(len(b"content-length:") - 1, len(lowered)), 0, -1):
        if lowered.endswith(b"content-length:"[:k]):
            return k
    return 0


def _structure(protocol: Any, raw: dict[str, Any]) -> Any:
    """The typed message for ``raw``. Requests and notifications are structured here, as pygls
    would, without the traceback pygls formats and logs for every one that does not fit."""
    method = raw.get("method")
    if not isinstance(method, str) or "error" in raw:
        return protocol.structure_message(raw)  # a response: pygls pairs it with its own request
    from pygls.protocol.json_rpc import JsonRPCNotification, JsonRPCRequestMessage

    default = JsonRPCRequestMessage if "id" in raw else JsonRPCNotification
    return protocol._converter.structure(raw, protocol.get_message_type(method) or default)


def _hand_over(protocol: Any, message: Any, raw: dict[str, Any]) -> None:
    """``protocol.handle_message(message)`` for a request or notification, as pygls 2 does it but
    without its runtime ``Protocol`` isinstance checks (a tenth of what a message cost): the raw
    message already says which it is. Anything else goes through pygls itself."""
    method = raw.get("method")
    if not isinstance(method, str) or raw.get("jsonrpc") != "2.0" or (protocol._shutdown and method != "exit"):
        protocol.handle_message(message)
        return
    ctx = contextvars.copy_context()  # each handler in its own context, as pygls runs them
    params = getattr(message, "params", None)
    if "id" in raw:
        ctx.run(protocol._handle_request, message.id, method, params)
    else:
        ctx.run(protocol._handle_notification, method, params)


def _short(exc: BaseException) -> str:
    """One line about why a message did not fit (cattrs nests the reasons in exception groups)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return f"{type(exc).__name__}: {str(exc)[:200]}"


def _error(code: int, message: str, msg_id: Any = None) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": msg_id, "error": {"code": code, "message": message}}


async def run_async(
    stop_event: threading.Event,
    read_chunk: Callable[[], Awaitable[bytes]],
    protocol: Any,
    send: Callable[[dict[str, Any]], None],
    error_handler: Callable[[Exception, type], Any] | None = None,
    timing: RequestTiming | None = None,
) -> None:
    """pygls' ``run_async`` with resynchronising framing (see the module's docstring).

    One task reads frames into an ``Inbox`` as they arrive; this one handles them, the
    reads that nothing queued can affect first (``inbox.py``).
    """
    stream = PushbackReader(read_chunk)
    inbox = Inbox()
    reading = asyncio.ensure_future(read_frames(stream, inbox, send))
    try:
        turn_started = time.monotonic()
        while not stop_event.is_set():
            item = inbox.take()
            if item is None:
                if reading.done():
                    break
                await inbox.arrival()
                turn_started = time.monotonic()
                continue
            jumped = dispatch(item, protocol, send, error_handler, timing)
            if jumped or time.monotonic() - turn_started > TURN_S:
                # Let tasks started by earlier messages (an answer that awaited an analysis, the
                # request that just went ahead) run, and the reading catch up, before the next one.
                await asyncio.sleep(0)
                turn_started = time.monotonic()
    finally:
        reading.cancel()
    if reading.done() and not reading.cancelled() and reading.exception() is not None:
        raise reading.exception()  # type: ignore[misc]


async def read_frames(stream: PushbackReader, inbox: Inbox, send: Callable[[dict[str, Any]], None]) -> None:
    """Read frames until the input ends, answering the ones that are not messages; queue the rest."""
    length: int | None = None
    try:
        while True:
            header = await stream.readline()
            if not header:
                return
            match = _HEADER.search(header)
            if match:
                length = int(match.group(1))
                if match.start():
                    log.warning("dropped %d bytes of junk before a frame header", match.start())
                continue
            if header.strip() or length is None:
                continue  # another header (Content-Type), or junk between frames
            wanted, length = min(length, MAX_BODY), None
            body = await stream.read_body(wanted) if wanted else b""
            if len(body) < wanted and stream.at_end and not _HEADER_INSIDE.search(body, 1):
                return  # end of input inside a frame: the client is gone
            raw = parse_body(body, stream, send)
            if raw is not None:
                await inbox.room()
                inbox.put(raw, stream.filled_at)
    finally:
        inbox.wake()


def parse_body(body: bytes, stream: PushbackReader, send: Callable[[dict[str, Any]], None]) -> dict[str, Any] | None:
    """The JSON-RPC message object in one frame's body, or None after answering why it is not one."""
    try:
        raw = json.loads(body)
    except (ValueError, RecursionError) as exc:
        inside = _HEADER_INSIDE.search(body, 1)
        if inside:
            # The frame's length was too long: it swallowed the frames after it. Read those again.
            stream.unread(body[inside.start():])
        else:
            tail = _partial_header(body)
            if tail:  # cut inside the next frame's header: give back its start
                stream.unread(body[-tail:])
        log.warning("not a JSON-RPC message (%s); %d bytes dropped", str(exc)[:200],
                    inside.start() if inside else len(body))
        send(_error(-32700, f"Parse error: {str(exc)[:200]}"))
        return None
    if not isinstance(raw, dict) or "jsonrpc" not in raw:
        log.warning("not a JSON-RPC message object: %.80r", body)
        send(_error(-32600, "Invalid Request: expected a JSON-RPC 2.0 message object"))
        return None
    msg_id = raw.get("id")
    valid_id = isinstance(msg_id, (str, int)) and not isinstance(msg_id, bool)
    if "id" in raw and not valid_id:
        log.warning("a message with an id that is not a string or a number: %.80r", body)
        send(_error(-32600, "Invalid Request: the id must be a string or a number"))
        return None
    return raw


def dispatch(item: Queued, protocol: Any, send: Callable[[dict[str, Any]], None],
             error_handler: Callable[[Exception, type], Any] | None = None,
             timing: RequestTiming | None = None) -> bool:
    """Hand one queued message to pygls; answer one it cannot take. True when it went ahead of others."""
    from pygls.exceptions import JsonRpcException

    raw = item.raw
    msg_id = raw.get("id")
    answerable = "method" in raw and "id" in raw
    try:
        # Structured at the top only: a nested object that happens to carry "jsonrpc" is params, not a message.
        message = _structure(protocol, raw)
    except Exception as exc:
        code = getattr(exc, "code", -32602)
        method = raw.get("method")
        log.warning("message %.80r (id %.40r) not understood: %s", method, msg_id, _short(exc))
        if answerable:
            send(_error(code, f"Invalid params for {method}", msg_id))
        return False
    if isinstance(message, dict) or not hasattr(message, "jsonrpc"):
        send(_error(-32600, "Invalid Request", msg_id if answerable else None))
        return False
    if timing is not None and answerable:
        timing.started(msg_id, raw.get("method"), item.read_at)
    try:
        _hand_over(protocol, message, raw)
    except Exception as exc:  # a message pygls could not place
        log.exception("unable to handle a message")
        if answerable:
            send(_error(-32603, f"Internal error: {exc}", msg_id))
        elif error_handler is not None:
            error_handler(exc, JsonRpcException)
    return item.ahead
