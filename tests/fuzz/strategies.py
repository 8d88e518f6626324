"""Hypothesis strategies for what a broken, hostile or merely odd client can send.

Frames (``frames``) are bytes ready for the wire: well-formed messages with bad
parameters, unknown methods, positions past the end and reversed ranges, URIs of
every shape, and frames that are not well-formed at all (bad JSON, wrong
``Content-Length``, junk between frames, JSON that is not a message). Edits
(``edit_sequences``) are incremental ``didChange`` content changes with text that
is hard on a parser: binary bytes, lone surrogates, deep nesting, long lines.
"""

from __future__ import annotations

import functools
import json
from typing import Any

from hypothesis import strategies as st

from tests.fuzz.wire import frame

# Methods a client may send during a session (not initialize / shutdown / exit, which end
# or restart it, nor trust or key changes, which would make the server run code).
REQUESTS = [
    "textDocument/hover", "textDocument/inlayHint", "textDocument/codeAction", "textDocument/diagnostic",
    "workspace/executeCommand", "stitch/serverInfo", "stitch/llmStatus", "textDocument/completion",
    "textDocument/definition", "workspace/symbol", "inlayHint/resolve", "codeAction/resolve",
    "workspace/diagnostic", "unknown/request", "$/unknown", "",
]
NOTIFICATIONS = [
    "textDocument/didOpen", "textDocument/didChange", "textDocument/didClose", "textDocument/didSave",
    "workspace/didChangeConfiguration", "workspace/didChangeWatchedFiles", "$/cancelRequest", "$/setTrace",
    "window/workDoneProgress/cancel", "unknown/notification", "stitch/setUserSettings",
]
COMMANDS = ["stitch.verifyKernel", "stitch.profileKernel", "stitch.showReport", "stitch.cancelAll", "stitch.fuse",
            "stitch.fuseSelection", "stitch.serverInfo", "stitch.nope"]

BIG = [0, 1, 2, 3, 10, 80, 2**16, 2**31 - 1, 2**31, 2**53, -1, -(2**31)]


def json_values(max_leaves: int = 8) -> st.SearchStrategy[Any]:
    leaves = (st.none() | st.booleans() | st.integers(min_value=-(2**63), max_value=2**64)
              | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=20))
    return st.recursive(leaves, lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=10), c, max_size=4),
                        max_leaves=max_leaves)


def ints() -> st.SearchStrategy[Any]:
    return st.sampled_from(BIG) | st.integers(min_value=0, max_value=200) | st.just(1.5) | st.just("3") | st.none()


def positions() -> st.SearchStrategy[Any]:
    good = st.fixed_dictionaries({"line": ints(), "character": ints()})
    return st.one_of(good, good, json_values(3), st.just({}), st.just({"line": 0}))


def ranges() -> st.SearchStrategy[Any]:
    return st.one_of(st.fixed_dictionaries({"start": positions(), "end": positions()}), json_values(3))


def uris(known: list[str]) -> st.SearchStrategy[Any]:
    odd = ["file:///nonexistent/dir/k.cu", "file:///", "untitled:Untitled-1", "http://example.invalid/k.cu",
           "", "not a uri", "file:///%ZZ%00.cu", "file://host/share/k.cu", "file:///tmp/../../etc/passwd",
           "vscode-notebook-cell:/x.py#W1", "file:///C:/x.cu", "file:///a%20b.py", "file:///" + "a/" * 300 + "k.cu"]
    return st.sampled_from(known) | st.sampled_from(odd) | st.text(max_size=30) | json_values(2)


def text_document(known: list[str]) -> st.SearchStrategy[Any]:
    return st.one_of(st.fixed_dictionaries({"uri": uris(known)}), json_values(2), st.just({}))


def params_for(method: str, known: list[str]) -> st.SearchStrategy[Any]:
    table = _params_table(tuple(known))
    return table.get(method, table[""])


@functools.lru_cache(maxsize=8)
def _params_table(known_t: tuple[str, ...]) -> dict[str, st.SearchStrategy[Any]]:
    # Built once: constructing strategies per draw costs more than drawing from them.
    known = list(known_t)
    td = text_document(known)
    shaped: dict[str, st.SearchStrategy[Any]] = {
        "textDocument/hover": st.fixed_dictionaries({"textDocument": td, "position": positions()}),
        "textDocument/completion": st.fixed_dictionaries({"textDocument": td, "position": positions()}),
        "textDocument/definition": st.fixed_dictionaries({"textDocument": td, "position": positions()}),
        "textDocument/inlayHint": st.fixed_dictionaries({"textDocument": td, "range": ranges()}),
        "textDocument/codeAction": st.fixed_dictionaries({
            "textDocument": td, "range": ranges(),
            "context": st.one_of(st.fixed_dictionaries({"diagnostics": st.lists(json_values(4), max_size=2),
                                                        "only": st.none() | st.lists(st.text(max_size=12), max_size=2)}),
                                 json_values(2))}),
        "textDocument/diagnostic": st.fixed_dictionaries({"textDocument": td}),
        "workspace/executeCommand": st.fixed_dictionaries({
            "command": st.sampled_from(COMMANDS) | st.text(max_size=12),
            "arguments": st.one_of(st.lists(st.one_of(uris(known), positions(), ranges(), json_values(3)), max_size=4),
                                   json_values(2))}),
        "textDocument/didOpen": st.fixed_dictionaries({"textDocument": st.fixed_dictionaries({
            "uri": uris(known), "languageId": st.sampled_from(["cuda-cpp", "python", "c", ""]) | st.text(max_size=5),
            "version": ints(), "text": st.text(max_size=200) | json_values(2)})}),
        "textDocument/didChange": st.fixed_dictionaries({
            "textDocument": st.fixed_dictionaries({"uri": uris(known), "version": ints()}),
            "contentChanges": st.lists(st.one_of(
                st.fixed_dictionaries({"range": ranges(), "text": st.text(max_size=40)}),
                st.fixed_dictionaries({"text": st.text(max_size=40)}), json_values(2)), max_size=3)}),
        "textDocument/didClose": st.fixed_dictionaries({"textDocument": td}),
        "textDocument/didSave": st.fixed_dictionaries({"textDocument": td, "text": st.none() | st.text(max_size=20)}),
        "workspace/didChangeWatchedFiles": st.fixed_dictionaries({"changes": st.lists(st.fixed_dictionaries({
            "uri": uris(known), "type": ints()}), max_size=3)}),
        "$/cancelRequest": st.fixed_dictionaries({"id": ints() | st.text(max_size=5)}),
        "stitch/setUserSettings": st.fixed_dictionaries({"settings": json_values(4)}),
        "workspace/didChangeConfiguration": st.fixed_dictionaries({"settings": json_values(4)}),
    }
    anything = json_values(3) | st.none()
    table = {method: strategy | anything for method, strategy in shaped.items()}
    table[""] = json_values(4) | anything
    return table


_REQUEST_METHODS = st.sampled_from(REQUESTS) | st.text(max_size=15)
_NOTIFICATION_METHODS = st.sampled_from(NOTIFICATIONS) | st.text(max_size=15)
_IDS = st.integers(min_value=10**9, max_value=2**53) | st.text(min_size=1, max_size=8).map(lambda t: "fz-" + t)


@st.composite
def message(draw: Any, known: list[str]) -> tuple[dict[str, Any], bool]:
    """A message object and whether it is a request (the server owes it an answer)."""
    if draw(st.booleans()):
        method = draw(_REQUEST_METHODS)
        msg = {"jsonrpc": "2.0", "id": draw(_IDS), "method": method}
        request = True
    else:
        method = draw(_NOTIFICATION_METHODS)
        msg = {"jsonrpc": "2.0", "method": method}
        request = False
    params = draw(params_for(method, known))
    if params is not None:
        msg["params"] = params
    return msg, request


_KINDS = st.sampled_from(["message"] * 6 + ["bad-json", "short-length", "long-length", "junk", "not-a-message",
                                            "bad-id", "no-version", "binary-body"])
_CUT_ENDS = st.sampled_from([b"", b"}", b",", b"\x00", b"{{", b"\xff\xfe"])
_JUNK = st.sampled_from([b"\r\n", b"garbage\r\n", b"Content-Type: x\r\n", b"Content-Length: abc\r\n",
                         b"\x00\x01\x02\r\n", b"Content-Length: -5\r\n\r\n"])
_BAD_IDS = st.sampled_from([True, None, 1.5, [1], {"a": 1}, ""])
_ANY_JSON = json_values(4)
_BINARY = st.binary(max_size=200)


@st.composite
def frames(draw: Any, known: list[str]) -> tuple[bytes, Any]:
    """(bytes for the wire, the id of a request the server must answer or None)."""
    kind = draw(_KINDS)
    msg, request = draw(message(known))
    body = json.dumps(msg, separators=(",", ":")).encode()
    msg_id = msg.get("id") if request else None
    if kind == "message":
        return frame(body), msg_id
    if kind == "bad-json":
        cut = draw(st.integers(min_value=0, max_value=max(0, len(body) - 1)))
        return frame(body[:cut] + draw(_CUT_ENDS)), None
    if kind == "short-length":
        return frame(body, max(0, len(body) - draw(st.integers(min_value=1, max_value=len(body))))), None
    if kind == "long-length":
        # A client that sends more afterwards: the frames after it are swallowed, then read again.
        return frame(body, len(body) + draw(st.integers(min_value=1, max_value=64))), "long"
    if kind == "junk":
        return draw(_JUNK) + frame(body), msg_id
    if kind == "not-a-message":
        return frame(json.dumps(draw(_ANY_JSON)).encode()), None
    if kind == "bad-id":
        bad = {**msg, "id": draw(_BAD_IDS)}
        return frame(json.dumps(bad).encode()), None
    if kind == "no-version":
        return frame(json.dumps({k: v for k, v in msg.items() if k != "jsonrpc"}).encode()), None
    return frame(draw(_BINARY)), None


# -- edits -------------------------------------------------------------------------------------------
HARD_TEXT = st.one_of(
    st.text(max_size=30),
    st.text(alphabet=st.characters(codec=None, categories=["Cs", "Co", "Cn", "Cc", "Zl", "Zp"]), max_size=10),
    st.binary(max_size=30).map(lambda b: b.decode("latin-1")),
    st.sampled_from(["{", "}", "(", ")", "[", "]", "<<<", ">>>", "\"", "'", "/*", "*/", "//", "#", "\\", "\n", "\r\n",
                     "\r", "\t", "__global__", "__syncthreads();", "if (", "def ", "class ", "import torch\n", "@",
                     "\u0000", "\ufeff", "\U0001f600", "é", "\ud800", "\udfff", "x @ w", "torch.relu(", "):\n    "]),
    st.integers(min_value=1, max_value=400).map(lambda n: "{" * n),
    st.integers(min_value=1, max_value=400).map(lambda n: "(" * n + ")" * n),
    st.integers(min_value=1, max_value=2000).map(lambda n: "x" * n),
    st.integers(min_value=1, max_value=200).map(lambda n: "\n" * n),
)


@st.composite
def edit_sequences(draw: Any) -> dict[str, Any]:
    """A document (language, starting text) and incremental edits, each with requests after it."""
    language = draw(st.sampled_from(["cuda", "python"]))
    edits = []
    for _ in range(draw(st.integers(min_value=1, max_value=5))):
        whole = draw(st.integers(min_value=0, max_value=9)) == 0
        edits.append({
            "whole": whole,
            "start": (draw(st.integers(0, 60)), draw(st.integers(0, 120))),
            "end": (draw(st.integers(0, 60)), draw(st.integers(0, 120))),
            "text": draw(HARD_TEXT),
        })
    probe = (draw(st.integers(0, 60)), draw(st.integers(0, 120)))
    return {"language": language, "edits": edits, "probe": probe}
