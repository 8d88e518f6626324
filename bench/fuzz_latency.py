"""Hover latency while the fuzz suite's traffic hits the server, and the fuzz figures of the run.

One real server over stdio (``tests/fuzz/wire.py``). A fuzzer thread sends the
fuzz suite's own traffic (``tests/fuzz/strategies.py``, seeded): batches of
malformed and odd JSON-RPC frames and batches of random incremental edit
sequences to ``.cu`` and ``.py`` documents, each followed by diagnostics, hover,
inlay hint and code action requests, and waits for every answer. Meanwhile the
main thread asks for a hover on a known kernel every ``--interval-ms`` and times
the answer. The same is measured first with the server idle, so the two sit side
by side. Crashes (the server exits) and hangs (a request unanswered for 10 s) are
counted.

Hypothesis draws the traffic in a process of its own (``--generator process``, the
default), as an editor's typing would come from outside the server and outside the
process that times the hover; the thread here only writes it and waits for the
answers. ``--generator thread`` draws it in the timing process, as the first version
of this benchmark did: then the hover's timing also carries that process's own
contention for its interpreter lock. The server reports when each timed hover
reached it and when it answered (``STITCH_REQUEST_TIMING``, see
``stitch_lsp/lsp/request_timing.py``), so every figure is split: waiting to be read,
inside the server, and back to the timing thread.

    python bench/fuzz_latency.py [--seconds 60] [--interval-ms 20] [--generator process|thread]
                                 [--out bench/results/fuzz_latency.txt]
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing
import os
import platform
import queue
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from hypothesis import HealthCheck, Phase, given, seed, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from hypothesis.errors import HypothesisException  # noqa: E402

from tests.fuzz.driver import Failure, FuzzSession  # noqa: E402
from tests.fuzz.strategies import edit_sequences, frames  # noqa: E402


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    k = min(len(ordered) - 1, max(0, math.ceil(q / 100 * len(ordered)) - 1))
    return ordered[k]


def sample_hovers(session: FuzzSession, seconds: float, interval: float,
                  stop: threading.Event | None = None) -> list[tuple[Any, float, float, float]]:
    """(request id, sending began, written, answer in hand) in ``time.monotonic()`` seconds, one per timed hover."""
    out = []
    end = time.monotonic() + seconds
    while time.monotonic() < end and not (stop is not None and stop.is_set()):
        start = time.monotonic()
        msg_id = session.client.request_async(
            "textDocument/hover", {"textDocument": {"uri": session.ref_uri}, "position": {"line": 0, "character": 17}})
        written = time.monotonic()
        answer = session._answer(msg_id)
        done = time.monotonic()
        out.append((msg_id, start, written, done))
        assert "`scale`" in answer["result"]["contents"]["value"]
        time.sleep(max(0.0, interval - (time.monotonic() - start)))
    return out


_COMMON = settings(database=None, deadline=None, phases=[Phase.generate], max_examples=10**6,
                   suppress_health_check=list(HealthCheck))


def _draw_batches(known: list[str], seed_value: int, put: Any, stopped: Any) -> None:
    """Call ``put((frames, edit sequences))`` for each batch Hypothesis draws, until ``stopped()``."""

    @seed(seed_value)
    @_COMMON
    @given(batch=st.lists(frames(known), min_size=25, max_size=25),
           edits=st.lists(edit_sequences(), min_size=4, max_size=4))
    def step(batch, edits):
        if stopped():
            raise _Done
        put((batch, edits))

    try:
        step()
    except _Done:
        pass


def _generator_process(known: list[str], seed_value: int, out: Any, stop: Any) -> None:
    # Drawing examples is Hypothesis' work, not the client's: it takes what CPU the server and
    # the timing process leave (a real editor's edits cost it next to nothing to produce).
    os.nice(19)
    def put(item: Any) -> None:
        while not stop.is_set():
            try:
                out.put(item, timeout=0.2)
                return
            except queue.Full:
                continue
        raise _Done

    try:
        _draw_batches(known, seed_value, put, stop.is_set)
    except _Done:
        pass
    except HypothesisException as exc:
        out.put(("error", str(exc)[:2000]))


class Fuzzer(threading.Thread):
    """Sends the drawn batches and waits for every answer; draws them in a child process or in this thread."""

    def __init__(self, session: FuzzSession, seed_value: int, generator: str = "process") -> None:
        super().__init__(name="fuzzer", daemon=True)
        self.session = session
        self.seed = seed_value
        self.generator = generator
        self.stop = threading.Event()
        self.failures: list[str] = []
        self.child_pid: int | None = None

    def send(self, item: Any) -> None:
        if self.stop.is_set():
            raise _Done
        batch, edits = item
        self.session.send_frames(batch)
        self.session.run_edits(edits)

    def run(self) -> None:
        try:
            if self.generator == "thread":
                _draw_batches(self.session.known, self.seed, self.send, self.stop.is_set)
            else:
                self._run_with_child()
        except _Done:
            pass
        except (Failure, HypothesisException, AssertionError) as exc:
            self.failures.append(str(exc)[:2000])
            self.stop.set()

    def _run_with_child(self) -> None:
        ctx = multiprocessing.get_context("spawn")  # this process has threads: no fork
        batches, child_stop = ctx.Queue(maxsize=2), ctx.Event()
        child = ctx.Process(target=_generator_process, args=(self.session.known, self.seed, batches, child_stop),
                            name="fuzz-generator", daemon=True)
        child.start()
        self.child_pid = child.pid
        try:
            while not self.stop.is_set():
                try:
                    item = batches.get(timeout=0.5)
                except queue.Empty:
                    if not child.is_alive():
                        raise Failure(f"the generator process exited ({child.exitcode})")
                    continue
                if item[0] == "error":
                    raise HypothesisException(item[1])
                self.send(item)
        finally:
            child_stop.set()
            child.join(10)
            if child.is_alive():
                child.kill()


class _Done(Exception):
    pass


def _cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds of process ``pid`` so far (Linux), or None."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def _waited_for_cpu(pid: int) -> float | None:
    """Seconds the thread ``pid`` (a process's main thread: the server's event loop) has spent
    runnable but waiting for a CPU (Linux schedstat), or None."""
    try:
        return int(Path(f"/proc/{pid}/task/{pid}/schedstat").read_text().split()[1]) / 1e9
    except (OSError, ValueError, IndexError):
        return None


def _split(samples: list[tuple[Any, float, float, float]],
           timing: dict[Any, dict[str, float]]) -> dict[str, list[float]]:
    """Each timed hover's milliseconds: the total, and its parts where the server reported them."""
    parts: dict[str, list[float]] = {"total": [], "writing": [], "to_server": [], "in_server": [], "queued": [],
                                     "handling": [], "back": []}
    for msg_id, sent, written, done in samples:
        parts["total"].append((done - sent) * 1000)
        parts["writing"].append((written - sent) * 1000)  # this process: encoding, the write lock, the write
        t = timing.get(msg_id)
        if t is None:
            continue
        parts["to_server"].append((t["read"] - written) * 1000)  # in the pipe until the server's loop read it
        parts["in_server"].append((t["answered"] - t["read"]) * 1000)
        parts["queued"].append((t["started"] - t["read"]) * 1000)  # behind other messages in the server's inbox
        parts["handling"].append((t["answered"] - t["started"]) * 1000)  # from dispatch to the answer written
        parts["back"].append((done - t["answered"]) * 1000)  # the pipe, this process reading and waking up
    return parts


def _stats(values: list[float]) -> dict[str, float] | None:
    if not values:
        return None
    return {"n": len(values), "p50": statistics.median(values), "p99": percentile(values, 99), "max": max(values)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=60.0, help="how long the fuzzer runs while hovers are timed")
    parser.add_argument("--idle-seconds", type=float, default=10.0)
    parser.add_argument("--interval-ms", type=float, default=20.0)
    parser.add_argument("--seed", type=int, default=17)
    parser.add_argument("--generator", choices=["process", "thread"], default="process",
                        help="where Hypothesis draws the fuzz traffic (see the module's docstring)")
    parser.add_argument("--out", default=str(REPO / "bench" / "results" / "fuzz_latency.txt"))
    args = parser.parse_args()
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="stitch-fuzz-bench-") as tmp:
        timing_path = Path(tmp) / "request-timing.jsonl"
        session = FuzzSession(Path(tmp), env={"STITCH_REQUEST_TIMING": str(timing_path)})
        idle = sample_hovers(session, args.idle_seconds, args.interval_ms / 1000)
        fuzzer = Fuzzer(session, args.seed, args.generator)
        frames_before, sequences_before = session.frames, session.sequences
        pid = session.client.proc.pid
        server_cpu_before, own_cpu_before, waited_before = _cpu_seconds(pid), time.process_time(), _waited_for_cpu(pid)
        fuzz_started = time.monotonic()
        fuzzer.start()
        try:
            loaded = sample_hovers(session, args.seconds, args.interval_ms / 1000, fuzzer.stop)
        except Failure as exc:
            fuzzer.failures.append(f"hover sampler: {str(exc)[:2000]}")
            loaded = []
        fuzz_seconds = time.monotonic() - fuzz_started
        server_cpu_after, own_cpu_after, waited_after = _cpu_seconds(pid), time.process_time(), _waited_for_cpu(pid)
        generator_cpu = _cpu_seconds(fuzzer.child_pid) if fuzzer.child_pid else None
        fuzzer.stop.set()
        fuzzer.join(60)
        alive = session.client.proc.poll() is None
        exit_code = session.close()
        timing = {}
        for line in timing_path.read_text().splitlines() if timing_path.exists() else []:
            entry = json.loads(line)
            timing[entry["id"]] = entry
    failures = fuzzer.failures
    server_cpu = (server_cpu_after - server_cpu_before) if None not in (server_cpu_before, server_cpu_after) else None
    figures: dict[str, Any] = {
        "seconds": args.seconds,
        "seed": args.seed,
        "generator": args.generator,
        "fuzz_frames": session.frames - frames_before,
        "edit_sequences": session.sequences - sequences_before,
        "crashes": 0 if alive else 1,
        "hangs": sum("hang:" in f for f in failures),
        "other_failures": [f for f in failures if "hang:" not in f],
        "clean_exit": exit_code == 0,
        # The server's CPU per second of fuzzing (1.0 = one core busy), and this process's own.
        "server_cpu_per_s": round(server_cpu / fuzz_seconds, 2) if server_cpu is not None else None,
        "bench_process_cpu_per_s": round((own_cpu_after - own_cpu_before) / fuzz_seconds, 2),
        "generator_cpu_per_s": round(generator_cpu / fuzz_seconds, 2) if generator_cpu is not None else None,
        # How long the server's event-loop thread was ready to run but had no CPU, per second of
        # fuzzing: the machine's share of the latency, not the server's.
        "loop_waited_for_cpu_per_s": (round((waited_after - waited_before) / fuzz_seconds, 3)
                                      if None not in (waited_before, waited_after) else None),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}",
        # The machine is shared: its 1-minute load before and after the run says how quiet it was.
        "load_average_1min": [round(load_before[0], 1), round(os.getloadavg()[0], 1)],
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
    }
    for name, samples in (("idle", idle), ("under_fuzz", loaded)):
        parts = _split(samples, timing)
        figures[f"hover_{name}_ms"] = _stats(parts["total"])
        figures[f"hover_{name}_parts_ms"] = {k: _stats(v) for k, v in parts.items() if k != "total"}
    lines = [
        f"# Hover latency while fuzzing ({time.strftime('%Y-%m-%d %H:%M')} UTC, {figures['machine']})",
        f"# {figures['command']}",
        f"# 1-minute load average before / after: {figures['load_average_1min'][0]} / {figures['load_average_1min'][1]}",
        f"# fuzz traffic drawn in: {'a process of its own' if args.generator == 'process' else 'a thread of the timing process'}",
        f"fuzz frames sent        {figures['fuzz_frames']}",
        f"edit sequences          {figures['edit_sequences']}",
        f"server crashes          {figures['crashes']}",
        f"hangs (no answer, 10 s) {figures['hangs']}",
        f"other failures          {len(figures['other_failures'])}",
        f"clean shutdown          {figures['clean_exit']}",
        f"CPU while fuzzing, core-s per s: server {figures['server_cpu_per_s']}, "
        f"this process {figures['bench_process_cpu_per_s']}, generator process {figures['generator_cpu_per_s']}",
        f"server event loop ready but waiting for a CPU: {figures['loop_waited_for_cpu_per_s']} s per s of fuzzing",
        "",
        f"{'hover (ms)':<40}{'n':>6}{'p50':>9}{'p99':>9}{'max':>9}",
    ]
    labels = {"writing": "  writing the request (this process)", "to_server": "  written -> read by the server",
              "in_server": "  read -> answered (inside the server)",
              "queued": "    read -> handled (queued)", "handling": "    handled -> answered",
              "back": "  answered -> in the timing thread"}
    for name, key in (("idle", "idle"), ("while fuzzing", "under_fuzz")):
        f = figures[f"hover_{key}_ms"]
        if not f:
            continue
        lines.append(f"{name:<40}{f['n']:>6}{f['p50']:>9.2f}{f['p99']:>9.2f}{f['max']:>9.2f}")
        for part, label in labels.items():
            g = figures[f"hover_{key}_parts_ms"][part]
            if g:
                lines.append(f"{label:<40}{g['n']:>6}{g['p50']:>9.2f}{g['p99']:>9.2f}{g['max']:>9.2f}")
    text = "\n".join(lines) + "\n"
    print(text)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    out.with_suffix(".json").write_text(json.dumps(figures, indent=2) + "\n")
    return 0 if not failures and alive else 1


if __name__ == "__main__":
    sys.exit(main())
