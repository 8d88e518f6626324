"""Reading JSON-RPC frames from stdio so that one bad frame costs one message, not the session.

pygls' loop matches ``Content-Length`` only at the start of a header line and
trusts the length it read. A single frame whose length is too short left the rest
of its body in front of the next header, every later header then began with junk,
and the server never heard another message; one whose length was too long
swallowed the frames after it. This loop finds a header wherever a line ends with
one, puts back what a too-long frame swallowed (from the first header inside it),
and answers what cannot be a message with the JSON-RPC errors for it (-32700
parse error, -32600 invalid request) instead of an "internal error" pop-up.
"""

from __future__ import annotations

import json
import logging
import re
import threading
from typing import Any, Awaitable, Callable

log = logging.getLogger(__name__)

_HEADER = re.compile(rb"content-length:[ \t]*(\d+)[ \t]*\r?\n$", re.IGNORECASE)
_HEADER_INSIDE = re.compile(rb"content-length:", re.IGNORECASE)
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


def chunks_of(stdin: Any, executor: Any) -> Callable[[], Awaitable[bytes]]:
    """``read_chunk`` for a binary stream: ``os.read`` on its descriptor, in ``executor``."""
    import asyncio
    import os

    try:
        fd = stdin.fileno()
    except (AttributeError, OSError, ValueError):
        fd = None

    def read() -> bytes:
        if fd is not None:
            return os.read(fd, 1 << 16)
        return stdin.read1(1 << 16) if hasattr(stdin, "read1") else stdin.read(1)

    async def read_chunk() -> bytes:
        return await asyncio.get_running_loop().run_in_executor(executor, read)

    return read_chunk


def _partial_header(body: bytes) -> int:
    """How many bytes at the end of ``body`` could begin a ``Content-Length:`` header."""
    lowered = body[-16:].lower()
    for k in range(min(len(b"content-length:") - 1, len(lowered)), 0, -1):
        if lowered.endswith(b"content-length:"[:k]):
            return k
    return 0


def _error(code: int, message: str, msg_id: Any = None) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": msg_id, "error": {"code": code, "message": message}}


async def run_async(
    stop_event: threading.Event,
    read_chunk: Callable[[], Awaitable[bytes]],
    protocol: Any,
    send: Callable[[dict[str, Any]], None],
    error_handler: Callable[[Exception, type], Any] | None = None,
) -> None:
    """pygls' ``run_async`` with resynchronising framing (see the module's docstring)."""
    stream = PushbackReader(read_chunk)
    length: int | None = None
    while not stop_event.is_set():
        header = await stream.readline()
        if not header:
            break
        match = _HEADER.search(header)
        if match:
            length = int(match.group(1))
            if match.start():
                log.warning("dropped %d bytes of junk before a frame header", match.start())
            continue
        if header.strip() or length is None:
            continue  # another header (Content-Type), or junk between frames
        wanted, length = min(length, MAX_BODY), None
        body = await stream.readexactly(wanted) if wanted else b""
        if len(body) < wanted:
            break  # end of input inside a frame: the client is gone
        handle_body(body, stream, protocol, send, error_handler)


def handle_body(body: bytes, stream: PushbackReader, protocol: Any, send: Callable[[dict[str, Any]], None],
                error_handler: Callable[[Exception, type], Any] | None = None) -> None:
    """Parse one frame's body and hand the message to pygls; answer what is not a message."""
    from pygls.exceptions import JsonRpcException

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
        return
    if not isinstance(raw, dict) or "jsonrpc" not in raw:
        log.warning("not a JSON-RPC message object: %.80r", body)
        send(_error(-32600, "Invalid Request: expected a JSON-RPC 2.0 message object"))
        return
    msg_id = raw.get("id")
    valid_id = isinstance(msg_id, (str, int)) and not isinstance(msg_id, bool)
    if "id" in raw and not valid_id:
        log.warning("a message with an id that is not a string or a number: %.80r", body)
        send(_error(-32600, "Invalid Request: the id must be a string or a number"))
        return
    answerable = "method" in raw and "id" in raw
    try:
        # Structured at the top only: a nested object that happens to carry "jsonrpc" is params, not a message.
        message = protocol.structure_message(raw)
    except (JsonRpcException, RecursionError, ValueError, TypeError) as exc:
        code = getattr(exc, "code", -32602)
        method = raw.get("method")
        log.warning("message %r (id %r) not understood: %s", method, msg_id, exc)
        if answerable:
            send(_error(code, f"Invalid params for {method}", msg_id))
        return
    if isinstance(message, dict) or not hasattr(message, "jsonrpc"):
        send(_error(-32600, "Invalid Request", msg_id if answerable else None))
        return
    try:
        protocol.handle_message(message)
    except Exception as exc:  # a message pygls could not place
        log.exception("unable to handle a message")
        if answerable:
            send(_error(-32603, f"Internal error: {exc}", msg_id))
        elif error_handler is not None:
            error_handler(exc, JsonRpcException)
