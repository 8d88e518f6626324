"""Drive the real server with fuzzed traffic, and check after every batch that it still answers correctly.

Shared by the fuzz tests (``tests/fuzz/``) and the latency benchmark
(``bench/fuzz_latency.py``), so the benchmark measures under the same load the
tests apply.
"""

from __future__ import annotations

import itertools
import textwrap
import time
from pathlib import Path
from typing import Any, Iterable

from tests.fuzz.wire import NoAnswer, ServerGone, WireClient

KERNEL = textwrap.dedent(
    """\
    __global__ void scale(float* y, const float* x, float a, int n) {
        int i = blockIdx.x * blockDim.x + threadIdx.x;
        if (i < n) y[i] = a * x[i];
    }
    """
)
PYTHON = textwrap.dedent(
    """\
    import torch
    import torch.nn.functional as F


    def block(x, w, b, scale):
        y = F.gelu(x @ w + b) * scale
        return torch.relu(y) + 1.0
    """
)
ANSWER_S = 10.0  # a request unanswered this long is a hang
# Bytes sent after a batch: a frame whose Content-Length was too long is filled by them
# (as it would be by an editor's next message), so no answer is owed to a swallowed frame forever.
PADDING = b"\r\n" * 40


class Failure(AssertionError):
    pass


class FuzzSession:
    def __init__(self, root: Path, env: dict[str, str] | None = None) -> None:
        self.root = root
        (root / "ref.cu").write_text(KERNEL)
        (root / "model.py").write_text(PYTHON)
        self.client = WireClient(root, env=env)
        self.client.initialize(trusted=False)
        self.ref_uri = self.client.open(root / "ref.cu", KERNEL)
        self.py_uri = self.client.open(root / "model.py", PYTHON, language="python")
        (root / "target.cu").write_text(KERNEL)
        target = self.client.open(root / "target.cu", KERNEL)
        # What the fuzzer may aim at; ref.cu is left alone, it is the yardstick.
        self.known = [target, self.py_uri, (root / "missing.cu").as_uri()]
        self.docs = itertools.count(1)
        self.frames = 0
        self.sequences = 0
        self.hover_ms: list[float] = []
        self.check_hover()

    # -- the check after every batch -------------------------------------------------------------
    def check_hover(self) -> float:
        """The reference kernel's hover card, correct and in time; returns milliseconds."""
        start = time.perf_counter()
        answer = self._answer(self.client.request_async(
            "textDocument/hover", {"textDocument": {"uri": self.ref_uri}, "position": {"line": 0, "character": 17}}))
        ms = (time.perf_counter() - start) * 1000
        value = ((answer.get("result") or {}).get("contents") or {}).get("value", "")
        if "`scale`" not in value:
            raise Failure(f"the hover on `scale` is wrong after the batch: {answer!r}")
        self.hover_ms.append(ms)
        return ms

    def _answer(self, msg_id: Any, within: float = ANSWER_S) -> dict[str, Any]:
        try:
            return self.client.wait(msg_id, within)
        except NoAnswer as exc:
            raise Failure(f"hang: {exc}\n--- server log ---\n{self.client.stderr_tail()}") from exc
        except ServerGone as exc:
            raise Failure(f"crash: {exc}\n--- server log ---\n{self.client.stderr_tail()}") from exc

    # -- malformed and odd messages ----------------------------------------------------------------
    def send_frames(self, batch: Iterable[tuple[bytes, Any]]) -> None:
        owed = []
        for data, msg_id in batch:
            self.client.send_raw(data)
            self.frames += 1
            if msg_id is not None and msg_id != "long":
                owed.append(msg_id)
        self.client.send_raw(PADDING, messages=0)
        for msg_id in owed:
            self._answer(msg_id)
        self.check_hover()

    # -- edit sequences ------------------------------------------------------------------------------
    def run_edits(self, sequences: list[dict[str, Any]]) -> None:
        """Each sequence on a document of its own, all sent before any answer is awaited (as an editor
        does while the user types), then every answer, then the hover check."""
        owed = []
        for seq in sequences:
            owed += self._send_sequence(seq)
        for msg_id in owed:
            answer = self._answer(msg_id)
            if "error" in answer and answer["error"].get("code") not in (-32602, -32800):
                raise Failure(f"a request about an edited document failed: {answer!r}")
        self.sequences += len(sequences)
        self.check_hover()

    def _send_sequence(self, seq: dict[str, Any]) -> list[int]:
        cuda = seq["language"] == "cuda"
        path = self.root / f"doc{next(self.docs)}.{'cu' if cuda else 'py'}"
        uri = self.client.open(path, KERNEL if cuda else PYTHON, language="cuda-cpp" if cuda else "python")
        self.frames += 1
        owed = []
        for version, edit in enumerate(seq["edits"], start=2):
            change: dict[str, Any] = {"text": edit["text"]}
            if not edit["whole"]:
                (sl, sc), (el, ec) = edit["start"], edit["end"]
                change["range"] = {"start": {"line": sl, "character": sc}, "end": {"line": el, "character": ec}}
            self.client.notify("textDocument/didChange",
                               {"textDocument": {"uri": uri, "version": version}, "contentChanges": [change]})
            owed += self._probe(uri, seq["probe"])
            self.frames += 5
        self.client.notify("textDocument/didSave", {"textDocument": {"uri": uri}})
        self.client.notify("textDocument/didClose", {"textDocument": {"uri": uri}})
        self.frames += 2
        return owed

    def _probe(self, uri: str, at: tuple[int, int]) -> list[int]:
        line, char = at
        doc = {"uri": uri}
        whole = {"start": {"line": 0, "character": 0}, "end": {"line": 10_000, "character": 0}}
        spot = {"start": {"line": line, "character": char}, "end": {"line": line, "character": char + 5}}
        return [
            self.client.request_async("textDocument/diagnostic", {"textDocument": doc}),
            self.client.request_async("textDocument/hover", {"textDocument": doc,
                                                             "position": {"line": line, "character": char}}),
            self.client.request_async("textDocument/inlayHint", {"textDocument": doc, "range": whole}),
            self.client.request_async("textDocument/codeAction", {"textDocument": doc, "range": spot,
                                                                  "context": {"diagnostics": []}}),
        ]

    def close(self) -> int | None:
        return self.client.close()

    @property
    def internal_errors(self) -> list[str]:
        return [m for m in self.client.shown if "internal error" in m]
