"""How fast `analyze_cuda` is on large generated files: cold, and per edit.

    PYTHONPATH=. python bench/analysis_speed.py [--lines 10000 100000] [--edits 40]

Prints, per file size: the cold analysis (fresh analyser: full parse, every function
analysed) next to tree-sitter's bare parse of the same text, then p50 / p99 of the
analysis after typical edits (a character typed inside one kernel; a line inserted
near the top, which moves every function below it). Each figure is given as CPU time
of this process and as wall time: on a shared machine the wall time includes waiting
for a core, the CPU time does not.
"""

from __future__ import annotations

import argparse
import platform
import time
from pathlib import Path

from stitch_lsp.analysis.cuda_analysis import CudaAnalyzer
from stitch_lsp.analysis.cuda_grammar import new_parser

REPO = Path(__file__).resolve().parents[1]
SOURCES = [REPO / "tests" / "analysis" / "fixtures" / "good_kernels.cu", REPO / "stitch_lsp" / "examples" / "buggy.cu"]


def generated_file(lines: int) -> str:
    units = [p.read_text() for p in SOURCES]
    parts, total, i = [], 0, 0
    while total < lines:
        text = units[i % len(units)]
        # Distinct names per copy so nothing is a duplicate definition.
        for name in ("vector_add", "saxpy_grid_stride", "relu_early_return", "matmul_tiled", "block_sum",
                     "transpose_tiled", "histogram_shared", "row_softmax", "scale_inplace",
                     "dynamic_shared_copy", "launch_all", "warp_reduce_sum", "scale", "shift", "row_sums", "run"):
            text = text.replace(f" {name}(", f" {name}_{i}(").replace(f"{name}<<<", f"{name}_{i}<<<")
        text = text.replace("#define CUDA_CHECK", f"#define CUDA_CHECK_{i}").replace("CUDA_CHECK(", f"CUDA_CHECK_{i}(")
        parts.append(text)
        total += text.count("\n")
        i += 1
    return "\n".join(parts)


def ms(seconds: float) -> str:
    return f"{seconds * 1000:7.1f} ms"


def timed(fn):
    c0, w0 = time.process_time(), time.perf_counter()
    fn()
    return time.process_time() - c0, time.perf_counter() - w0


def stats(samples: list[tuple[float, float]]) -> str:
    cpu = [c for c, _ in samples]
    wall = [w for _, w in samples]
    return (f"p50 {ms(pct(cpu, 0.5))} p99 {ms(pct(cpu, 0.99))} CPU | "
            f"p50 {ms(pct(wall, 0.5))} p99 {ms(pct(wall, 0.99))} wall")


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q * (len(values) - 1))))]


def run(lines: int, edits: int) -> None:
    text = generated_file(lines)
    n_lines = text.count("\n") + 1
    src = text.encode()
    parse = timed(lambda: new_parser().parse(src))

    analyzer = CudaAnalyzer("bench.cu")
    holder = {}
    cold = timed(lambda: holder.setdefault("a", analyzer.analyze(text)))
    first = holder["a"]
    print(f"\n{n_lines:,} lines, {len(src) / 1e6:.1f} MB, {len(first.kernels)} kernels, {len(first.findings)} findings")
    print(f"  cold analysis             {ms(cold[0])} CPU | {ms(cold[1])} wall"
          f"   (tree-sitter parse alone {ms(parse[0])} CPU)")

    anchor = text.index("int tid = threadIdx.x;", len(text) // 2)
    typed, inserted = [], []
    for k in range(edits):
        # Type one character inside a kernel in the middle of the file, then delete it.
        current = text[:anchor] + "x" + text[anchor:] if k % 2 == 0 else text
        typed.append(timed(lambda: analyzer.analyze(current)))
    for k in range(edits):
        # Insert / remove an empty line near the top: every later function moves down.
        current = "\n" + text if k % 2 == 0 else text
        inserted.append(timed(lambda: analyzer.analyze(current)))
    print(f"  edit inside one kernel    {stats(typed)}")
    print(f"  line inserted at the top  {stats(inserted)}")
    fresh = CudaAnalyzer("bench.cu").analyze(current)
    assert fresh == analyzer.analyze(current), "incremental result differs from a fresh analysis"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--lines", type=int, nargs="+", default=[10_000, 100_000])
    ap.add_argument("--edits", type=int, default=40)
    args = ap.parse_args()
    print(f"analyze_cuda speed on {platform.node()} ({platform.processor() or platform.machine()}), "
          f"Python {platform.python_version()}")
    for n in args.lines:
        run(n, args.edits if n <= 20_000 else max(6, args.edits // 5))


if __name__ == "__main__":
    main()
