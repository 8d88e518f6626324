"""A raw JSON-RPC client for the real server over stdio: it can send what no well-made client would.

pytest-lsp (and pygls' client) only send well-formed messages; the fuzz suite
also needs bad JSON, wrong ``Content-Length`` headers and garbage between frames.
This client writes bytes as given, reads the server's frames on a thread, answers
the server's own requests (``workspace/configuration`` and the like) the way a
plain editor does, and says when the server died or stopped answering.
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]


def frame(body: bytes, length: int | None = None) -> bytes:
    n = len(body) if length is None else length
    return b"Content-Length: " + str(n).encode() + b"\r\n\r\n" + body


def encode(message: dict[str, Any]) -> bytes:
    return frame(json.dumps(message, ensure_ascii=False, separators=(",", ":")).encode("utf-8", "surrogatepass"))


class ServerGone(Exception):
    pass


class NoAnswer(Exception):
    pass


class WireClient:
    """One server process; ``send_raw`` for anything, ``request`` / ``notify`` for messages."""

    def __init__(self, root: Path, *, settings: dict[str, Any] | None = None, env: dict[str, str] | None = None,
                 log_path: Path | None = None) -> None:
        self.root = root
        self.settings = {"diagnosticsDebounceMs": 0, **(settings or {})}
        full_env = dict(os.environ)
        full_env["PYTHONPATH"] = str(REPO) + (os.pathsep + full_env["PYTHONPATH"] if full_env.get("PYTHONPATH") else "")
        full_env["STITCH_CONFIG"] = os.devnull
        full_env.update(env or {})
        self.log_path = log_path or (root / "server-stderr.log")
        self._stderr = open(self.log_path, "wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "stitch_lsp"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=self._stderr, env=full_env, cwd=str(root), start_new_session=True,
        )
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._write_lock = threading.Lock()
        self._answers: dict[Any, list[dict[str, Any]]] = {}  # a client may reuse an id: one answer each
        self._cond = threading.Condition(self._lock)
        self.notifications: dict[str, int] = {}
        self.diagnostics: dict[str, list[Any]] = {}
        self.shown: list[str] = []
        self.sent_messages = 0
        self.sent_bytes = 0
        self._reader = threading.Thread(target=self._read_loop, name="wire-reader", daemon=True)
        self._reader.start()

    # -- writing -------------------------------------------------------------------------
    def send_raw(self, data: bytes, *, messages: int = 1) -> None:
        if self.proc.poll() is not None:
            raise ServerGone(f"the server exited with {self.proc.returncode}")
        with self._write_lock:
            try:
                assert self.proc.stdin is not None
                self.proc.stdin.write(data)
                self.proc.stdin.flush()
            except (BrokenPipeError, OSError) as exc:
                raise ServerGone(f"writing to the server failed: {exc}") from exc
        self.sent_messages += messages
        self.sent_bytes += len(data)

    def send(self, message: dict[str, Any]) -> None:
        self.send_raw(encode(message))

    def notify(self, method: str, params: Any = None) -> None:
        self.send({"jsonrpc": "2.0", "method": method, **({} if params is None else {"params": params})})

    def request_async(self, method: str, params: Any = None) -> int:
        msg_id = next(self._ids)
        self.send({"jsonrpc": "2.0", "id": msg_id, "method": method, **({} if params is None else {"params": params})})
        return msg_id

    def wait(self, msg_id: Any, timeout: float = 10.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        with self._cond:
            while not self._answers.get(msg_id):
                left = deadline - time.monotonic()
                if self.proc.poll() is not None:
                    raise ServerGone(f"the server exited with {self.proc.returncode} (waiting for {msg_id})")
                if left <= 0:
                    raise NoAnswer(f"no answer to request {msg_id} within {timeout:g} s")
                self._cond.wait(min(left, 0.2))
            return self._answers[msg_id].pop(0)

    def request(self, method: str, params: Any = None, timeout: float = 10.0) -> dict[str, Any]:
        return self.wait(self.request_async(method, params), timeout)

    # -- session -------------------------------------------------------------------------
    def initialize(self, trusted: bool = False) -> dict[str, Any]:
        caps = {
            "textDocument": {
                "hover": {"contentFormat": ["markdown", "plaintext"]},
                "inlayHint": {},
                "codeAction": {"codeActionLiteralSupport": {"codeActionKind": {"valueSet": ["quickfix", "refactor"]}}},
                "diagnostic": {"dynamicRegistration": False},
                "publishDiagnostics": {},
                "synchronization": {"didSave": True},
            },
            "workspace": {"configuration": True, "workspaceFolders": True},
            "window": {"workDoneProgress": True, "showMessage": {}},
            "general": {"positionEncodings": ["utf-16"]},
        }
        answer = self.request("initialize", {
            "processId": os.getpid(), "rootUri": self.root.as_uri(),
            "workspaceFolders": [{"uri": self.root.as_uri(), "name": self.root.name}],
            "capabilities": caps, "initializationOptions": {"trusted": trusted},
        }, timeout=60)
        self.notify("initialized", {})
        return answer

    def open(self, path: Path, text: str, language: str = "cuda-cpp", version: int = 1) -> str:
        uri = path.as_uri()
        self.notify("textDocument/didOpen", {"textDocument": {"uri": uri, "languageId": language, "version": version,
                                                              "text": text}})
        return uri

    def close(self, timeout: float = 10.0) -> int | None:
        """Shut down politely; kill if it will not go. Returns the exit code."""
        try:
            if self.proc.poll() is None:
                self.request("shutdown", None, timeout=timeout)
                self.notify("exit")
                self.proc.wait(timeout)
        except (ServerGone, NoAnswer, subprocess.TimeoutExpired):
            pass
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait(10)
            self._stderr.close()
        return self.proc.returncode

    def stderr_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    # -- reading -------------------------------------------------------------------------
    def _read_loop(self) -> None:
        out = self.proc.stdout
        assert out is not None
        while True:
            length = None
            while True:
                line = out.readline()
                if not line:
                    with self._cond:
                        self._cond.notify_all()
                    return
                if line in (b"\r\n", b"\n"):
                    break
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":", 1)[1].strip())
            if length is None:
                continue
            body = out.read(length)
            try:
                message = json.loads(body)
            except ValueError:
                continue
            self._dispatch(message)

    def _dispatch(self, message: dict[str, Any]) -> None:
        method = message.get("method")
        if method is not None and "id" in message:
            self._answer_server_request(message)
            return
        if method is not None:
            with self._lock:
                self.notifications[method] = self.notifications.get(method, 0) + 1
                if method == "textDocument/publishDiagnostics":
                    params = message.get("params") or {}
                    self.diagnostics[params.get("uri", "")] = params.get("diagnostics", [])
                elif method == "window/showMessage":
                    self.shown.append((message.get("params") or {}).get("message", ""))
            return
        msg_id = message.get("id")
        with self._cond:
            key = msg_id if isinstance(msg_id, (str, int, type(None))) else repr(msg_id)
            self._answers.setdefault(key, []).append(message)
            self._cond.notify_all()

    def _answer_server_request(self, message: dict[str, Any]) -> None:
        method = message["method"]
        result: Any = None
        if method == "workspace/configuration":
            items = (message.get("params") or {}).get("items", [])
            result = [self.settings if item.get("section") == "stitch" else None for item in items]
        try:
            self.send({"jsonrpc": "2.0", "id": message["id"], "result": result})
            self.sent_messages -= 1  # answers to the server are not fuzz
        except ServerGone:
            pass
