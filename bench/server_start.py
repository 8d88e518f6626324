"""How fast the server starts, as an editor meets it: spawn → ``initialize`` answered → first
diagnostics of a small ``.cu`` file, and a restart (shutdown/exit of one server, then the next one's
first diagnostics).

Speaks raw JSON-RPC over the child's pipes (no client library to import or warm up), so the
figures are the server's: the editor's own overhead is in ``client/e2e`` (``bench/results/editor_e2e``).

    python bench/server_start.py [--runs 7] [--out bench/results/server_start.txt]

Prints each run and the median. The machine may be shared: say so with the figures, and trust the
median, not one run.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import select
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

SMALL_CU = """__global__ void scale(const float* x, float* y, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    y[i] = a * x[i];
}
"""


class Wire:
    """A JSON-RPC peer on a child's stdio, enough for a timing run."""

    def __init__(self, proc: subprocess.Popen) -> None:
        self.proc = proc
        self.buf = b""
        self.next_id = 0

    def send(self, method: str, params: object, request: bool = False) -> int | None:
        msg: dict = {"jsonrpc": "2.0", "method": method, "params": params}
        rid = None
        if request:
            self.next_id += 1
            rid = msg["id"] = self.next_id
        body = json.dumps(msg).encode()
        assert self.proc.stdin is not None
        self.proc.stdin.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
        self.proc.stdin.flush()
        return rid

    def answer(self, rid: object, result: object) -> None:
        body = json.dumps({"jsonrpc": "2.0", "id": rid, "result": result}).encode()
        assert self.proc.stdin is not None
        self.proc.stdin.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
        self.proc.stdin.flush()

    def read(self, timeout: float) -> dict | None:
        deadline = time.monotonic() + timeout
        fd = self.proc.stdout.fileno()  # type: ignore[union-attr]
        while True:
            head, sep, rest = self.buf.partition(b"\r\n\r\n")
            if sep:
                length = int([ln for ln in head.split(b"\r\n") if ln.lower().startswith(b"content-length")][0]
                             .split(b":")[1])
                if len(rest) >= length:
                    self.buf = rest[length:]
                    return json.loads(rest[:length])
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            ready, _, _ = select.select([fd], [], [], left)
            if ready:
                chunk = os.read(fd, 65536)
                if not chunk:
                    return None
                self.buf += chunk


def one_start(root: Path, cu: Path, command: list[str], env: dict[str, str]) -> dict[str, float]:
    """Times (s) from spawn: initialize answered, first diagnostics of ``cu``; then shutdown + exit."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            env=env, cwd=root)
    wire = Wire(proc)
    times: dict[str, float] = {}
    init_id = wire.send("initialize", {
        "processId": os.getpid(), "rootUri": root.as_uri(),
        "workspaceFolders": [{"uri": root.as_uri(), "name": root.name}],
        "capabilities": {"workspace": {"configuration": True}, "window": {"workDoneProgress": True}},
        "initializationOptions": {"trusted": True, "settings": {"diagnosticsDebounceMs": 0}},
    }, request=True)
    # An editor sends initialized and didOpen right after the answer; the file is opened at once.
    while True:
        msg = wire.read(60)
        if msg is None:
            raise RuntimeError("the server did not answer initialize")
        if msg.get("id") == init_id and "method" not in msg:
            times["initialize"] = time.perf_counter() - t0
            break
    wire.send("initialized", {})
    wire.send("textDocument/didOpen", {"textDocument": {"uri": cu.as_uri(), "languageId": "cuda-cpp",
                                                        "version": 1, "text": SMALL_CU}})
    while "diagnostics" not in times:
        msg = wire.read(60)
        if msg is None:
            raise RuntimeError("no diagnostics within 60 s")
        method = msg.get("method")
        if method and "id" in msg:  # a request from the server: answer as an editor would
            wire.answer(msg["id"], [{"diagnosticsDebounceMs": 0}] if method == "workspace/configuration" else None)
        elif method == "textDocument/publishDiagnostics" and msg["params"]["uri"] == cu.as_uri() \
                and msg["params"]["diagnostics"]:
            times["diagnostics"] = time.perf_counter() - t0
    t1 = time.perf_counter()
    sid = wire.send("shutdown", None, request=True)
    while True:
        msg = wire.read(20)
        if msg is None or (msg.get("id") == sid and "method" not in msg):
            break
        if msg.get("method") and "id" in msg:
            wire.answer(msg["id"], None)
    wire.send("exit", None)
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    times["stop"] = time.perf_counter() - t1
    return times


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--command", default=None, help="server command (default: stitch-lsp of this checkout)")
    args = parser.parse_args(argv)
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["STITCH_CONFIG"] = os.devnull
    command = args.command.split() if args.command else [sys.executable, "-m", "stitch_lsp"]
    rows = []
    with tempfile.TemporaryDirectory(prefix="stitch-start-") as tmp:
        root = Path(tmp)
        cu = root / "scale.cu"
        cu.write_text(SMALL_CU)
        for i in range(args.runs):
            t = one_start(root, cu, command, env)
            # "Restart Server" as the extension does it: stop the old one, start a new one.
            t["restart"] = t["stop"] + t["diagnostics"]
            rows.append(t)
            print(f"run {i + 1}: initialize {t['initialize']:.2f} s, first diagnostics {t['diagnostics']:.2f} s, "
                  f"stop {t['stop']:.2f} s, restart (stop + start to diagnostics) {t['restart']:.2f} s", flush=True)
    med = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
    load = os.getloadavg()
    lines = [
        f"server start, {args.runs} runs, {platform.node()} ({os.cpu_count()} CPUs, load average "
        f"{load[0]:.1f} {load[1]:.1f} {load[2]:.1f} at the end: the machine is shared with other work), "
        f"Python {platform.python_version()}",
        f"median: initialize answered {med['initialize']:.2f} s; first diagnostics of a small .cu "
        f"{med['diagnostics']:.2f} s (target <= 1.5 s); restart {med['restart']:.2f} s (target <= 3 s)",
        "all runs (s): " + "; ".join(f"{r['initialize']:.2f}/{r['diagnostics']:.2f}/{r['restart']:.2f}" for r in rows)
        + "  (initialize / diagnostics / restart)",
    ]
    print("\n".join(lines))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
