"""A local stand-in for the Anthropic Messages API, scripted per test.

Speaks what the real SDK expects over real HTTP: ``POST /v1/messages`` answered
either with an error status and the API's JSON error body, or with a chunked
``text/event-stream`` of ``message_start``, ``content_block_start``,
``ping``, ``content_block_delta`` (text split into several deltas),
``content_block_stop``, ``message_delta`` (stop reason and usage) and
``message_stop``. Each request consumes the next scripted turn; every request is
recorded (headers, raw body, parsed JSON) so tests can check what was sent.

    with FakeMessagesAPI([Reply("```python ..."), ApiError(429)]) as api:
        client = anthropic.Anthropic(api_key="k", base_url=api.base_url)
"""

from __future__ import annotations

import itertools
import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Iterable

from attrs import define, field


@define
class Reply:
    """A complete streamed answer."""

    text: str
    input_tokens: int = 1200
    output_tokens: int | None = None  # default: about a token per 4 characters
    cache_read_input_tokens: int = 0
    cache_creation_input_tokens: int = 0
    stop_reason: str = "end_turn"  # end_turn | max_tokens | stop_sequence
    chunk_chars: int = 40  # characters per content_block_delta
    delay_s: float = 0.0  # pause before each delta (a slow model)

    def tokens_out(self) -> int:
        return self.output_tokens if self.output_tokens is not None else max(1, len(self.text) // 4)


@define
class ApiError:
    """An HTTP error with the API's JSON error body (429, 500, 529, 401, ...)."""

    status: int
    error_type: str = ""  # default from the status
    message: str = ""
    retry_after_ms: int | None = 5  # keeps the tests fast; None sends no retry header

    def body(self) -> dict:
        kind = self.error_type or _ERROR_TYPES.get(self.status, "api_error")
        return {"type": "error", "error": {"type": kind, "message": self.message or kind.replace("_", " ")}}


@define
class CutStream:
    """Starts streaming ``text`` and drops the connection after ``after_chars`` characters."""

    text: str
    after_chars: int = 60
    input_tokens: int = 1200


@define
class StreamError:
    """HTTP 200, a few deltas, then an SSE ``error`` event (how overload shows mid-stream)."""

    text: str = "Let me "
    error_type: str = "overloaded_error"
    message: str = "Overloaded"


Turn = Reply | ApiError | CutStream | StreamError

_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    529: "overloaded_error",
}


@define
class RecordedRequest:
    method: str
    path: str
    headers: dict[str, str]
    raw_body: bytes
    body: dict = field(factory=dict)

    @property
    def system_text(self) -> str:
        system = self.body.get("system", "")
        if isinstance(system, str):
            return system
        return "\n".join(block.get("text", "") for block in system)

    def message_texts(self, role: str | None = None) -> list[str]:
        """The text of every message (all its text blocks joined), oldest first."""
        out = []
        for message in self.body.get("messages", []):
            if role and message.get("role") != role:
                continue
            content = message.get("content")
            if isinstance(content, str):
                out.append(content)
            else:
                out.append("\n".join(b.get("text", "") for b in content if b.get("type") == "text"))
        return out

    def cache_marked_blocks(self) -> list[dict]:
        """Every system / message content block that carries ``cache_control``."""
        blocks = []
        system = self.body.get("system")
        if isinstance(system, list):
            blocks += [b for b in system if "cache_control" in b]
        for message in self.body.get("messages", []):
            content = message.get("content")
            if isinstance(content, list):
                blocks += [b for b in content if "cache_control" in b]
        return blocks


class FakeMessagesAPI:
    """Serves scripted turns on 127.0.0.1 in a background thread."""

    def __init__(self, turns: Iterable[Turn] = (), *, api_key: str | None = None) -> None:
        self._turns = list(turns)
        self._lock = threading.Lock()
        self.api_key = api_key  # when set, any other key gets a 401
        self.requests: list[RecordedRequest] = []
        self.unscripted = 0  # requests that arrived after the script ran out
        self._ids = itertools.count(1)
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="fake-messages-api", daemon=True)

    # -- lifecycle ---------------------------------------------------------------------
    def __enter__(self) -> "FakeMessagesAPI":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    @property
    def base_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    # -- script ------------------------------------------------------------------------
    def add(self, *turns: Turn) -> None:
        with self._lock:
            self._turns.extend(turns)

    @property
    def remaining(self) -> int:
        with self._lock:
            return len(self._turns)

    def _next_turn(self) -> Turn | None:
        with self._lock:
            return self._turns.pop(0) if self._turns else None

    def _record(self, request: RecordedRequest) -> None:
        with self._lock:
            self.requests.append(request)

    def next_message_id(self) -> str:
        return f"msg_fake_{next(self._ids):04d}"


def _handler_for(api: FakeMessagesAPI) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: object) -> None:  # keep test output clean
            return None

        def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
            length = int(self.headers.get("content-length") or 0)
            raw = self.rfile.read(length) if length else b""
            try:
                body = json.loads(raw) if raw else {}
            except ValueError:
                body = {}
            api._record(RecordedRequest("POST", self.path, {k.lower(): v for k, v in self.headers.items()}, raw, body))
            if self.path.split("?")[0] != "/v1/messages":
                self._json(404, ApiError(404).body())
                return
            if api.api_key is not None and self._presented_key() != api.api_key:
                self._json(401, ApiError(401, message="invalid x-api-key").body(), retry=False)
                return
            turn = api._next_turn()
            if turn is None:
                api.unscripted += 1
                self._json(400, ApiError(400, message="fake server: no scripted turn left").body(), retry=False)
            elif isinstance(turn, ApiError):
                extra = {"retry-after-ms": str(turn.retry_after_ms)} if turn.retry_after_ms is not None else {}
                self._json(turn.status, turn.body(), extra=extra)
            else:
                self._stream(turn, body)

        def _presented_key(self) -> str | None:
            if key := self.headers.get("x-api-key"):
                return key
            auth = self.headers.get("authorization") or ""
            return auth[len("Bearer ") :] if auth.startswith("Bearer ") else None

        # -- plain JSON responses --------------------------------------------------
        def _json(self, status: int, payload: dict, *, extra: dict | None = None, retry: bool | None = None) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.send_header("request-id", f"req_fake_{status}")
            if retry is not None:
                self.send_header("x-should-retry", "true" if retry else "false")
            for key, value in (extra or {}).items():
                self.send_header(key, value)
            self.end_headers()
            self.wfile.write(data)

        # -- SSE ---------------------------------------------------------------------
        def _stream(self, turn: Reply | CutStream | StreamError, request_body: dict) -> None:
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.send_header("cache-control", "no-cache")
            self.send_header("transfer-encoding", "chunked")
            self.send_header("request-id", "req_fake_stream")
            self.end_headers()
            model = request_body.get("model", "claude-fake")
            usage_in = getattr(turn, "input_tokens", 1200)
            cache_read = getattr(turn, "cache_read_input_tokens", 0)
            cache_write = getattr(turn, "cache_creation_input_tokens", 0)
            self._event("message_start", {
                "type": "message_start",
                "message": {
                    "id": api.next_message_id(), "type": "message", "role": "assistant", "model": model,
                    "content": [], "stop_reason": None, "stop_sequence": None,
                    "usage": {"input_tokens": usage_in, "output_tokens": 1,
                              "cache_read_input_tokens": cache_read,
                              "cache_creation_input_tokens": cache_write},
                },
            })
            self._event("content_block_start", {"type": "content_block_start", "index": 0,
                                                "content_block": {"type": "text", "text": ""}})
            self._event("ping", {"type": "ping"})
            if isinstance(turn, CutStream):
                self._deltas(turn.text[: turn.after_chars], 20)
                self._drop_connection()
                return
            if isinstance(turn, StreamError):
                self._deltas(turn.text, 20)
                self._event("error", {"type": "error", "error": {"type": turn.error_type, "message": turn.message}})
                self._end_chunks()
                return
            self._deltas(turn.text, turn.chunk_chars, turn.delay_s)
            self._event("content_block_stop", {"type": "content_block_stop", "index": 0})
            self._event("message_delta", {
                "type": "message_delta",
                "delta": {"stop_reason": turn.stop_reason, "stop_sequence": None},
                "usage": {"output_tokens": turn.tokens_out()},
            })
            self._event("message_stop", {"type": "message_stop"})
            self._end_chunks()

        def _deltas(self, text: str, size: int, delay_s: float = 0.0) -> None:
            for start in range(0, len(text), max(1, size)):
                if delay_s:
                    time.sleep(delay_s)
                self._event("content_block_delta", {
                    "type": "content_block_delta", "index": 0,
                    "delta": {"type": "text_delta", "text": text[start : start + size]},
                })

        def _event(self, name: str, data: dict) -> None:
            payload = f"event: {name}\ndata: {json.dumps(data)}\n\n".encode()
            self.wfile.write(f"{len(payload):x}\r\n".encode() + payload + b"\r\n")
            self.wfile.flush()

        def _end_chunks(self) -> None:
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
            self.close_connection = True

        def _drop_connection(self) -> None:
            # No terminating chunk: the client sees the body end mid-message.
            self.wfile.flush()
            try:
                self.connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            self.close_connection = True

    return Handler
