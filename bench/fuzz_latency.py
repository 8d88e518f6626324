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

    python bench/fuzz_latency.py [--seconds 60] [--interval-ms 20] [--out bench/results/fuzz_latency.txt]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

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


def sample_hovers(session: FuzzSession, seconds: float, interval: float, stop: threading.Event | None = None) -> list[float]:
    out = []
    end = time.monotonic() + seconds
    while time.monotonic() < end and not (stop is not None and stop.is_set()):
        start = time.perf_counter()
        msg_id = session.client.request_async(
            "textDocument/hover", {"textDocument": {"uri": session.ref_uri}, "position": {"line": 0, "character": 17}})
        answer = session._answer(msg_id)
        out.append((time.perf_counter() - start) * 1000)
        assert "`scale`" in answer["result"]["contents"]["value"]
        time.sleep(max(0.0, interval - (time.perf_counter() - start)))
    return out


class Fuzzer(threading.Thread):
    def __init__(self, session: FuzzSession, seed_value: int) -> None:
        super().__init__(name="fuzzer", daemon=True)
        self.session = session
        self.seed = seed_value
        self.stop = threading.Event()
        self.failures: list[str] = []

    def run(self) -> None:
        common = settings(database=None, deadline=None, phases=[Phase.generate], max_examples=10**6,
                          suppress_health_check=list(HealthCheck))
        session, stop = self.session, self.stop

        @seed(self.seed)
        @common
        @given(batch=st.lists(frames(session.known), min_size=25, max_size=25),
               edits=st.lists(edit_sequences(), min_size=4, max_size=4))
        def step(batch, edits):
            if stop.is_set():
                raise _Done
            session.send_frames(batch)
            session.run_edits(edits)

        try:
            step()
        except _Done:
            pass
        except (Failure, HypothesisException, AssertionError) as exc:
            self.failures.append(str(exc)[:2000])
            stop.set()


class _Done(Exception):
    pass


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=60.0, help="how long the fuzzer runs while hovers are timed")
    parser.add_argument("--idle-seconds", type=float, default=10.0)
    parser.add_argument("--interval-ms", type=float, default=20.0)
    parser.add_argument("--seed", type=int, default=17)
    parser.add_argument("--out", default=str(REPO / "bench" / "results" / "fuzz_latency.txt"))
    args = parser.parse_args()
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="stitch-fuzz-bench-") as tmp:
        session = FuzzSession(Path(tmp))
        idle = sample_hovers(session, args.idle_seconds, args.interval_ms / 1000)
        fuzzer = Fuzzer(session, args.seed)
        frames_before, sequences_before = session.frames, session.sequences
        fuzzer.start()
        try:
            loaded = sample_hovers(session, args.seconds, args.interval_ms / 1000, fuzzer.stop)
        except Failure as exc:
            fuzzer.failures.append(f"hover sampler: {str(exc)[:2000]}")
            loaded = []
        fuzzer.stop.set()
        fuzzer.join(60)
        alive = session.client.proc.poll() is None
        exit_code = session.close()
    failures = fuzzer.failures
    figures = {
        "seconds": args.seconds,
        "seed": args.seed,
        "fuzz_frames": session.frames - frames_before,
        "edit_sequences": session.sequences - sequences_before,
        "crashes": 0 if alive else 1,
        "hangs": sum("hang:" in f for f in failures),
        "other_failures": [f for f in failures if "hang:" not in f],
        "clean_exit": exit_code == 0,
        "hover_idle_ms": {"n": len(idle), "p50": statistics.median(idle), "p99": percentile(idle, 99), "max": max(idle)},
        "hover_under_fuzz_ms": ({"n": len(loaded), "p50": statistics.median(loaded), "p99": percentile(loaded, 99),
                                 "max": max(loaded)} if loaded else None),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}",
        # The machine is shared: its 1-minute load before and after the run says how quiet it was.
        "load_average_1min": [round(load_before[0], 1), round(os.getloadavg()[0], 1)],
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
    }
    lines = [
        f"# Hover latency while fuzzing ({time.strftime('%Y-%m-%d %H:%M')} UTC, {figures['machine']})",
        f"# {figures['command']}",
        f"# 1-minute load average before / after: {figures['load_average_1min'][0]} / {figures['load_average_1min'][1]}",
        f"fuzz frames sent        {figures['fuzz_frames']}",
        f"edit sequences          {figures['edit_sequences']}",
        f"server crashes          {figures['crashes']}",
        f"hangs (no answer, 10 s) {figures['hangs']}",
        f"other failures          {len(figures['other_failures'])}",
        f"clean shutdown          {figures['clean_exit']}",
        "",
        f"{'hover (ms)':<22}{'n':>6}{'p50':>9}{'p99':>9}{'max':>9}",
    ]
    for name, key in (("idle", "hover_idle_ms"), ("while fuzzing", "hover_under_fuzz_ms")):
        f = figures[key]
        if f:
            lines.append(f"{name:<22}{f['n']:>6}{f['p50']:>9.2f}{f['p99']:>9.2f}{f['max']:>9.2f}")
    text = "\n".join(lines) + "\n"
    print(text)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    out.with_suffix(".json").write_text(json.dumps(figures, indent=2) + "\n")
    return 0 if not failures and alive else 1


if __name__ == "__main__":
    sys.exit(main())
