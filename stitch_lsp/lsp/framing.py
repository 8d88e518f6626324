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
    """An async ``readline`` / ``readexactly`` reader with bytes put back in front."""

    def __init__(self, reader: Any) -> None:
        self._reader = reader
        self._buffer = b""

    def unread(self, data: bytes) -> None:
        self._buffer = data + self._buffer

    async def readline(self) -> bytes:
        if self._buffer:
            cut = self._buffer.find(b"\n")
            if cut >= 0:
                line, self._buffer = self._buffer[: cut + 1], self._buffer[cut + 1 :]
                return line
            head, self._buffer = self._buffer, b""
            return head + await self._reader.readline()
        return await self._reader.readline()

    async def readexactly(self, n: int) -> bytes:
        head, self._buffer = self._buffer[:n], self._buffer[n:]
        out = [head]
        need = n - len(head)
        while need > 0:
            chunk = await self._reader.readexactly(need)
            if not chunk:
                break
            out.append(chunk)
            need -= len(chunk)
        return b"".join(out)


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
    reader: Any,
    protocol: Any,
    send: Callable[[dict[str, Any]], None],
    error_handler: Callable[[Exception, type], Any] | None = None,
) -> None:
    """pygls' ``run_async`` with resynchronising framing (see the module's docstring)."""
    stream = PushbackReader(reader)
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
