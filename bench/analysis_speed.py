"""How fast `analyze_cuda` is on large generated files: cold, and per edit.

    PYTHONPATH=. python bench/analysis_speed.py [--lines 10000 100000] [--edits 40]

Prints, per file size: the cold analysis (fresh analyser: full parse, every function
analysed) next to tree-sitter's bare parse of the same text, then p50 / p99 of the
analysis after typical edits (a character typed inside one kernel; a line inserted
near the top, which moves every function below it).
"""

from __future__ import annotations

import argparse
import platform
import statistics
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
        text = text.replace("(", f"(", 1)
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
    return f"{seconds * 1000:8.1f} ms"


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q * (len(values) - 1))))]


def run(lines: int, edits: int) -> None:
    text = generated_file(lines)
    n_lines = text.count("\n") + 1
    src = text.encode()
    t0 = time.perf_counter()
    new_parser().parse(src)
    parse = time.perf_counter() - t0

    analyzer = CudaAnalyzer("bench.cu")
    t0 = time.perf_counter()
    first = analyzer.analyze(text)
    cold = time.perf_counter() - t0
    print(f"\n{n_lines:,} lines, {len(src) / 1e6:.1f} MB, {len(first.kernels)} kernels, {len(first.findings)} findings")
    print(f"  cold analysis          {ms(cold)}   (tree-sitter parse alone {ms(parse)})")

    anchor = text.index("int tid = threadIdx.x;", len(text) // 2)
    typed, inserted = [], []
    current = text
    for k in range(edits):
        # Type one character inside a kernel in the middle of the file, then delete it.
        current = current[:anchor] + "x" + current[anchor:] if k % 2 == 0 else text
        t0 = time.perf_counter()
        analyzer.analyze(current)
        typed.append(time.perf_counter() - t0)
    for k in range(edits):
        # Insert / remove an empty line near the top: every later function moves down.
        current = "\n" + text if k % 2 == 0 else text
        t0 = time.perf_counter()
        analyzer.analyze(current)
        inserted.append(time.perf_counter() - t0)
    print(f"  edit inside one kernel p50 {ms(pct(typed, 0.5))}  p99 {ms(pct(typed, 0.99))}")
    print(f"  line inserted at top   p50 {ms(pct(inserted, 0.5))}  p99 {ms(pct(inserted, 0.99))}")
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
