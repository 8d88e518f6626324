"""The parent <-> worker wire protocol: length-prefixed JSON frames.

Plain data only (no torch): both the server side (``verify.worker_pool``) and the
worker child (``stitch_lsp.worker.main``) import this module.

A frame is a 4-byte big-endian length followed by that many bytes of UTF-8 JSON.
The parent sends one ``Request``; the worker answers with any number of
``Progress`` frames and then exactly one ``Reply``. Payloads are the
``serde.to_dict`` form of the handler's own attrs classes, so adding a request
kind never changes this module.
"""

from __future__ import annotations

import json
import struct
from typing import Any, BinaryIO

from attrs import define, field

from stitch_lsp.serde import from_dict, to_dict

MAX_FRAME = 256 * 1024 * 1024
_HEADER = struct.Struct(">I")


class ProtocolError(Exception):
    """The other side sent something that is not a frame (or closed the pipe)."""


@define
class Request:
    kind: str  # handler name, see stitch_lsp.worker.handlers.HANDLERS
    payload: Any = None
    job_id: str = ""


@define
class Progress:
    stage: str
    message: str = ""
    percent: int | None = None


@define
class Reply:
    ok: bool
    payload: Any = None
    # When ok is false: a short error class ("bad_request", "handler_error", ...) and the text.
    error: str = ""
    message: str = ""
    traceback: str = ""
    # The worker asks to be replaced after this job (its CUDA context is poisoned,
    # it ran out of memory, a candidate left threads behind, ...).
    retire: bool = False
    retire_reason: str = ""


@define
class Frame:
    """What actually travels: exactly one of the three is set."""

    request: Request | None = None
    progress: Progress | None = None
    reply: Reply | None = None
    extra: dict[str, Any] = field(factory=dict)


def encode(frame: Frame) -> bytes:
    body = json.dumps(to_dict(frame), separators=(",", ":"), allow_nan=True).encode()
    if len(body) > MAX_FRAME:
        raise ProtocolError(f"frame of {len(body)} bytes exceeds {MAX_FRAME}")
    return _HEADER.pack(len(body)) + body


def write_frame(stream: BinaryIO, frame: Frame) -> None:
    stream.write(encode(frame))
    stream.flush()


def _read_exact(stream: BinaryIO, n: int) -> bytes:
    chunks = []
    remaining = n
    while remaining:
        chunk = stream.read(remaining)
        if not chunk:
            raise ProtocolError("pipe closed")
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)


def read_frame(stream: BinaryIO) -> Frame:
    (length,) = _HEADER.unpack(_read_exact(stream, _HEADER.size))
    if length > MAX_FRAME:
        raise ProtocolError(f"frame of {length} bytes exceeds {MAX_FRAME}")
    try:
        return from_dict(json.loads(_read_exact(stream, length)), Frame)
    except (ValueError, TypeError) as exc:
        raise ProtocolError(f"malformed frame: {exc}") from exc


class FrameDecoder:
    """Incremental decoder for the parent, which reads with select() and a deadline."""

    def __init__(self) -> None:
        self._buf = bytearray()

    def feed(self, data: bytes) -> list[Frame]:
        self._buf.extend(data)
        frames: list[Frame] = []
        while len(self._buf) >= _HEADER.size:
            (length,) = _HEADER.unpack_from(self._buf, 0)
            if length > MAX_FRAME:
                raise ProtocolError(f"frame of {length} bytes exceeds {MAX_FRAME}")
            if len(self._buf) < _HEADER.size + length:
                break
            body = bytes(self._buf[_HEADER.size : _HEADER.size + length])
            del self._buf[: _HEADER.size + length]
            try:
                frames.append(from_dict(json.loads(body), Frame))
            except (ValueError, TypeError) as exc:
                raise ProtocolError(f"malformed frame: {exc}") from exc
        return frames
