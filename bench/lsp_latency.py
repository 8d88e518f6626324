"""Latency of the Stitch language server, driven over stdio like an editor would.

Starts the real server (``python -m stitch_lsp``) with pygls' client, opens a
generated CUDA file (10,000 lines by default) and measures, from the client side:

- ``static diagnostics``: an incremental ``didChange`` that adds or removes a bounds
  guard mid-file, until ``publishDiagnostics`` for that document version arrives
  with the finding gone or back (the debounce is set to 0 ms through settings, so it
  is excluded; the time includes applying the edit, re-analysing, converting and
  publishing every diagnostic of the file);
- ``hover``, ``inlay hints`` (a 200-line window, as an editor asks for the visible
  part), ``code actions`` (at a rule finding, with its diagnostic in the context).

Prints p50 / p99 / max per scenario and condition. Conditions are the state of the
server while measuring: ``idle``, or ``gpu-job`` (a verification job runs the whole
time, streaming work-done progress; see ``bench/job_condition.py``). Add one by
writing an async context manager ``condition(bench)`` and registering it in
``CONDITIONS``.

    python bench/lsp_latency.py [--lines 10000] [--iterations 200] [--out bench/results/lsp_latency.txt]
    python bench/lsp_latency.py --conditions idle gpu-job [--real-gpu]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import os
import platform
import re
import shlex
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import AsyncIterator, Awaitable, Callable

from lsprotocol import types as lsp
from pygls.lsp.client import LanguageClient
from pygls.protocol import LanguageServerProtocol

REPO = Path(__file__).resolve().parents[1]

# -- the document ----------------------------------------------------------------------------
_KERNELS = [
    """__global__ void scale_{n}(const float* __restrict__ x, float* __restrict__ y, float a, int n) {{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {{
        y[i] = a * x[i] + {n}.0f;
    }}
}}
""",
    """__global__ void reduce_{n}(const float* __restrict__ x, float* __restrict__ out, int n) {{
    __shared__ float s[256];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    s[threadIdx.x] = i < n ? x[i] : 0.0f;
    __syncthreads();
    for (int stride = blockDim.x / 2; stride > 0; stride >>= 1) {{
        if (threadIdx.x < stride) s[threadIdx.x] += s[threadIdx.x + stride];
        __syncthreads();
    }}
    if (threadIdx.x == 0) out[blockIdx.x] = s[0];
}}
""",
    """__global__ void unguarded_{n}(float* y, float* x, int n) {{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    y[i] = x[i] * 2.0f;
}}

void launch_{n}(float* y, const float* x, int n) {{
    unguarded_{n}<<<(n + 255) / 256, 256>>>(y, x, n);
}}
""",
]


def generate(lines: int, planted_every: int = 3) -> str:
    """A CUDA file of about ``lines`` lines: clean kernels and reductions, and every
    ``planted_every``-th kernel an unguarded write through a read-only pointer that is not
    `const` (two rule findings each: STC001, STC008). The default, 3, makes about a thousand diagnostics in 10,000 lines:
    far more than a real file has, so that converting and sending them is measured."""
    parts = ["#include <cuda_runtime.h>\n\n"]
    count, n = 2, 0
    while count < lines:
        if n % planted_every == planted_every - 1:
            template = _KERNELS[2]
        else:
            template = _KERNELS[n % 2]
        chunk = template.format(n=n) + "\n"
        parts.append(chunk)
        count += chunk.count("\n")
        n += 1
    return "".join(parts)


# -- the client ------------------------------------------------------------------------------
class TimingProtocol(LanguageServerProtocol):
    """Timestamps publishDiagnostics as soon as its JSON is parsed.

    Turning a thousand diagnostics into lsprotocol objects takes this Python client
    far longer than it takes an editor to read them; that is the client's cost, not
    the server's latency, so the bench keeps the raw list and skips it.
    """

    on_publish: Callable[[dict], None] | None = None

    def structure_message(self, data):
        if isinstance(data, dict) and data.get("method") == lsp.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS:
            if self.on_publish is not None:
                self.on_publish(data.get("params") or {})
            data = {**data, "params": {**data["params"], "diagnostics": []}}
        return super().structure_message(data)


class Bench:
    def __init__(self, root: Path, text: str, log_file: Path) -> None:
        self.root = root
        self.text = text
        self.lines = text.split("\n")
        self.path = root / "big.cu"
        self.path.write_text(text)
        self.uri = self.path.as_uri()
        self.version = 1
        self.guarded = False
        self.log_file = log_file
        self.client = LanguageClient("stitch-latency-bench", "1", protocol_cls=TimingProtocol)
        self.published: dict[int, float] = {}
        self.latest: list[dict] = []  # the last published diagnostics, as JSON
        self._waiters: dict[int, asyncio.Future] = {}

        def on_publish(params: dict) -> None:
            if params.get("uri") != self.uri:
                return
            now = time.perf_counter()
            version = params.get("version")
            if version is not None:
                self.published[version] = now
                waiter = self._waiters.pop(version, None)
                if waiter is not None and not waiter.done():
                    waiter.set_result(now)
            self.latest = list(params.get("diagnostics") or [])

        self.client.protocol.on_publish = on_publish

        @self.client.feature(lsp.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS)
        def on_diagnostics(params: lsp.PublishDiagnosticsParams) -> None:
            return None

        @self.client.feature(lsp.WORKSPACE_CONFIGURATION)
        def configuration(params: lsp.ConfigurationParams) -> list:
            return [SETTINGS for _ in params.items]

        @self.client.feature(lsp.WINDOW_LOG_MESSAGE)
        def log_message(params: lsp.LogMessageParams) -> None:
            return None

        @self.client.feature(lsp.WINDOW_SHOW_MESSAGE)
        def show_message(params: lsp.ShowMessageParams) -> None:
            return None

        self.progress_notifications = 0
        self.notes: list[str] = []  # what a condition wants said under the table

        @self.client.feature(lsp.WINDOW_WORK_DONE_PROGRESS_CREATE)
        def create_progress(params: lsp.WorkDoneProgressCreateParams) -> None:
            return None

        @self.client.feature(lsp.PROGRESS)
        def progress(params: lsp.ProgressParams) -> None:
            self.progress_notifications += 1

    async def start(self) -> None:
        env = dict(os.environ)
        env["PYTHONPATH"] = str(REPO) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        await self.client.start_io(
            sys.executable, "-m", "stitch_lsp", "--log-file", str(self.log_file), "--log-level", "DEBUG", env=env
        )
        caps = lsp.ClientCapabilities(
            window=lsp.WindowClientCapabilities(work_done_progress=True),
            workspace=lsp.WorkspaceClientCapabilities(configuration=True),
            text_document=lsp.TextDocumentClientCapabilities(
                synchronization=lsp.TextDocumentSyncClientCapabilities(did_save=True),
                publish_diagnostics=lsp.PublishDiagnosticsClientCapabilities(version_support=True),
                hover=lsp.HoverClientCapabilities(content_format=[lsp.MarkupKind.Markdown]),
                inlay_hint=lsp.InlayHintClientCapabilities(),
                code_action=lsp.CodeActionClientCapabilities(),
            ),
        )
        await self.client.initialize_async(
            lsp.InitializeParams(
                capabilities=caps,
                root_uri=self.root.as_uri(),
                initialization_options={"settings": SETTINGS},
            )
        )
        self.client.initialized(lsp.InitializedParams())
        self.client.text_document_did_open(
            lsp.DidOpenTextDocumentParams(
                text_document=lsp.TextDocumentItem(uri=self.uri, language_id="cuda-cpp", version=1, text=self.text)
            )
        )
        # The first analysis of the whole file (a cold parse) is not what an edit costs.
        await self.wait_for_version(1, timeout=120)

    async def stop(self) -> None:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.client.shutdown_async(None), 20)
            self.client.exit(None)
        await self.client.stop()

    async def wait_for_version(self, version: int, timeout: float = 30) -> float:
        if version in self.published:
            return self.published[version]
        fut = asyncio.get_running_loop().create_future()
        self._waiters[version] = fut
        return await asyncio.wait_for(fut, timeout)

    def edit(self, iteration: int) -> None:
        """Add or remove a bounds guard on one write mid-file: a rule finding appears or goes.

        Every edit changes what the editor must show, so every edit is published (the
        server skips publishing a set of diagnostics that did not change).
        """
        line = self.edit_line
        indent = len(self.lines[line]) - len(self.lines[line].lstrip())
        guard = "if (i < n) "
        self.version += 1
        if self.guarded:
            rng = lsp.Range(
                start=lsp.Position(line=line, character=indent),
                end=lsp.Position(line=line, character=indent + len(guard)),
            )
            text = ""
        else:
            rng = lsp.Range(start=lsp.Position(line=line, character=indent), end=lsp.Position(line=line, character=indent))
            text = guard
        self.guarded = not self.guarded
        self.client.text_document_did_change(
            lsp.DidChangeTextDocumentParams(
                text_document=lsp.VersionedTextDocumentIdentifier(uri=self.uri, version=self.version),
                content_changes=[lsp.TextDocumentContentChangePartial(range=rng, text=text)],
            )
        )

    @property
    def edit_line(self) -> int:
        # The middle of the file, in a kernel with a planted finding.
        middle = len(self.lines) // 2
        return next(i for i in range(middle, len(self.lines)) if "x[i] * " in self.lines[i])

    def kernel_name_position(self, index: int) -> lsp.Position:
        lines = [i for i, t in enumerate(self.lines) if t.startswith("__global__")]
        line = lines[(index * 7919) % len(lines)]
        return lsp.Position(line=line, character=self.lines[line].index("(") - 2)


SETTINGS = {"diagnosticsDebounceMs": 0, "onSave": {"compile": False}}


# -- scenarios -------------------------------------------------------------------------------
async def static_diagnostics(bench: Bench, i: int) -> float:
    start = time.perf_counter()
    bench.edit(i)
    end = await bench.wait_for_version(bench.version)
    return end - start


async def hover(bench: Bench, i: int) -> float:
    start = time.perf_counter()
    await bench.client.text_document_hover_async(
        lsp.HoverParams(text_document=lsp.TextDocumentIdentifier(uri=bench.uri), position=bench.kernel_name_position(i))
    )
    return time.perf_counter() - start


async def inlay_hints(bench: Bench, i: int) -> float:
    first = (i * 997) % max(1, len(bench.lines) - 200)
    start = time.perf_counter()
    await bench.client.text_document_inlay_hint_async(
        lsp.InlayHintParams(
            text_document=lsp.TextDocumentIdentifier(uri=bench.uri),
            range=lsp.Range(start=lsp.Position(line=first, character=0), end=lsp.Position(line=first + 200, character=0)),
        )
    )
    return time.perf_counter() - start


async def code_actions(bench: Bench, i: int) -> float:
    diags = bench.latest or []
    if diags:
        raw = diags[(i * 31) % len(diags)]
        d = bench.client.protocol._converter.structure(raw, lsp.Diagnostic)
        rng, context = d.range, lsp.CodeActionContext(diagnostics=[d])
    else:
        pos = bench.kernel_name_position(i)
        rng, context = lsp.Range(start=pos, end=pos), lsp.CodeActionContext(diagnostics=[])
    start = time.perf_counter()
    await bench.client.text_document_code_action_async(
        lsp.CodeActionParams(text_document=lsp.TextDocumentIdentifier(uri=bench.uri), range=rng, context=context)
    )
    return time.perf_counter() - start


Scenario = Callable[[Bench, int], Awaitable[float]]
SCENARIOS: dict[str, tuple[Scenario, float]] = {
    # name: (one measurement, goal for p99 in ms)
    "static diagnostics": (static_diagnostics, 50.0),
    "hover": (hover, 20.0),
    "inlay hints": (inlay_hints, 20.0),
    "code actions": (code_actions, 20.0),
}


# -- conditions ------------------------------------------------------------------------------
@contextlib.asynccontextmanager
async def idle(bench: Bench) -> AsyncIterator[None]:
    """Nothing else running in the server."""
    yield


sys.path.insert(0, str(Path(__file__).resolve().parent))
from job_condition import gpu_job, stand_in_env  # noqa: E402

Condition = Callable[[Bench], contextlib.AbstractAsyncContextManager]
CONDITIONS: dict[str, Condition] = {"idle": idle, "gpu-job": gpu_job}


# -- running and reporting -----------------------------------------------------------------------
def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    k = (len(ordered) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def machine() -> list[str]:
    cpu = platform.processor() or "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg()) if hasattr(os, "getloadavg") else "?"
    return [
        f"machine: {cpu}, {os.cpu_count()} logical cores visible, load average {load} at start",
        f"python: {platform.python_implementation()} {platform.python_version()} on {platform.platform()}",
    ]


async def run(args: argparse.Namespace) -> list[str]:
    text = generate(args.lines, args.planted_every)
    out: list[str] = []
    described = machine()  # before the run: the load average it started under
    if not args.client_gc:
        # This Python client parses each publishDiagnostics (hundreds of KB of JSON) into
        # fresh objects; its cyclic GC then pauses it for tens of milliseconds now and then,
        # which showed up as the p99 of "static diagnostics" although the server had long
        # answered. Everything it builds is freed by reference counting, so the collector is
        # off while it measures (--client-gc keeps it on). The server's GC is untouched.
        gc.disable()
    with tempfile.TemporaryDirectory(prefix="stitch-latency-") as tmp:
        root = Path(tmp)
        bench = Bench(root, text, root / "server.log")
        if "gpu-job" in args.conditions and not args.real_gpu:
            os.environ.update(stand_in_env(root))
        await bench.start()
        try:
            results: list[tuple[str, str, list[float], float]] = []
            for cond_name in args.conditions:
                async with CONDITIONS[cond_name](bench):
                    for name in args.scenarios:
                        scenario, goal = SCENARIOS[name]
                        for i in range(args.warmup):
                            await scenario(bench, i)
                        samples = [await scenario(bench, args.warmup + i) for i in range(args.iterations)]
                        results.append((cond_name, name, samples, goal))
        finally:
            await bench.stop()
        server_side = server_timings(bench.log_file)
    analysis_ms = analysis_alone(text, args.iterations) if args.analysis_baseline else []
    doc_lines = text.count("\n")
    out += described
    out.append(
        f"document: {doc_lines} lines of CUDA, {len(bench.latest)} diagnostics (a planted pair every "
        f"{args.planted_every} kernels); client GC {'on' if args.client_gc else 'off'}; "
        f"{args.iterations} measurements per row after {args.warmup} warm-up"
    )
    out.append("")
    out.append(f"{'condition':<10} {'scenario':<20} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8} {'goal p99':>9}  met")
    for cond_name, name, samples, goal in results:
        ms = [s * 1000 for s in samples]
        p50, p99 = percentile(ms, 0.5), percentile(ms, 0.99)
        out.append(
            f"{cond_name:<10} {name:<20} {p50:8.1f} {p99:8.1f} {max(ms):8.1f} {goal:8.0f}   {'yes' if p99 < goal else 'NO'}"
        )
    if bench.notes:
        out.append("")
        out += bench.notes
    if server_side:
        analysed, published = zip(*server_side)
        out.append("")
        out.append(
            f"inside the server, per static-diagnostics edit: analysis p50 {percentile(list(analysed), 0.5):.1f} / "
            f"p99 {percentile(list(analysed), 0.99):.1f} ms, converting + sending p50 "
            f"{percentile(list(published), 0.5):.1f} / p99 {percentile(list(published), 0.99):.1f} ms "
            f"({len(server_side)} edits; the rest of the client-side figure is transport, the client and the machine)"
        )
    if analysis_ms:
        out.append("")
        out.append(
            f"for comparison, analyze_cuda alone on the same edits, in this process: "
            f"p50 {percentile(analysis_ms, 0.5):.1f} ms, p99 {percentile(analysis_ms, 0.99):.1f} ms "
            "(static diagnostics minus this is the server's own share: sync, conversion, transport)"
        )
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg()) if hasattr(os, "getloadavg") else "?"
    out.append(f"load average at end: {load}")
    return out


_SERVER_TIMING = re.compile(r"static rules: \S+ v\d+ analysed in ([\d.]+) ms, published in ([\d.]+) ms")


def server_timings(log_file: Path) -> list[tuple[float, float]]:
    """(analysis ms, publish ms) for every static-rules pass the server logged, first (cold) one dropped."""
    try:
        text = log_file.read_text(errors="replace")
    except OSError:
        return []
    rows = [(float(a), float(b)) for a, b in _SERVER_TIMING.findall(text)]
    return rows[1:]


def analysis_alone(text: str, iterations: int) -> list[float]:
    """The CUDA analysis of the same one-character edits, without the server around it."""
    sys.path.insert(0, str(REPO))
    from stitch_lsp.analysis.cuda_analysis import analyze_cuda

    path = "/bench/analysis-baseline.cu"
    analyze_cuda(text, path)
    lines = text.split("\n")
    middle = len(lines) // 2
    line = next(i for i in range(middle, len(lines)) if "x[i] * " in lines[i])
    indent = len(lines[line]) - len(lines[line].lstrip())
    offset = sum(len(l) + 1 for l in lines[:line]) + indent
    guarded = text[:offset] + "if (i < n) " + text[offset:]
    samples = []
    for i in range(iterations):
        start = time.perf_counter()
        analyze_cuda(guarded if i % 2 == 0 else text, path)
        samples.append((time.perf_counter() - start) * 1000)
    return samples


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lines", type=int, default=10_000)
    parser.add_argument("--planted-every", type=int, default=3, help="every N-th kernel has two rule findings")
    parser.add_argument("--iterations", type=int, default=200)
    parser.add_argument("--client-gc", action="store_true", help="leave the measuring client's cyclic GC on")
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--scenarios", nargs="+", default=list(SCENARIOS), choices=list(SCENARIOS))
    parser.add_argument("--conditions", nargs="+", default=["idle"], choices=list(CONDITIONS))
    parser.add_argument("--real-gpu", action="store_true",
                        help="gpu-job: run the real Verifier on this machine's GPU (default: the CPU stand-in worker)")
    parser.add_argument(
        "--no-analysis-baseline", dest="analysis_baseline", action="store_false",
        help="skip timing analyze_cuda alone in this process",
    )
    parser.add_argument("--out", type=Path, help="also write the report here, with the command that made it")
    args = parser.parse_args(argv)
    try:
        lines = asyncio.run(run(args))
    finally:
        gc.enable()
    report = "\n".join(lines)
    print(report)
    if args.out:
        command = "python " + shlex.join([os.path.relpath(__file__, REPO), *(argv if argv is not None else sys.argv[1:])])
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(f"$ {command}\n{report}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
