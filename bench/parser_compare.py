"""tree-sitter (with statement-level recovery) against libclang as the parser of the static
rules: per file, how long a parse takes and how many kernels each can read in full.

    pip install libclang        # not a project dependency: this bench only
    python bench/parser_compare.py DIR... [--out bench/results/parser_compare.md]

tree-sitter: a kernel counts as read when the analysis does not skip it whole
(`KernelInfo.parse_ok`); the statements it skipped inside kernels are counted apart.
libclang: the file is parsed as CUDA (host side, then device side) with the CUDA toolkit's
headers, the file's own folder and the folders named `include`/`Common` up the tree on the
include path, exactly what an editor without a compile_commands.json can offer; each kernel
tree-sitter found counts as read when clang reports no error inside its lines and the file
had no fatal error (a header not found stops clang's parse of everything after it).
Time is wall time per file on this (shared) machine: what a save waits for.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

from stitch_lsp.analysis.cuda_analysis import CudaAnalyzer

SUFFIXES = (".cu", ".cuh")
CUDA = Path("/usr/local/cuda/include")


def clang_args(path: Path, device: bool) -> list[str]:
    gcc = sorted(Path("/usr/lib/gcc/x86_64-linux-gnu").glob("*/include"))
    args = ["-x", "cuda", "-std=c++17", "-nocudainc", "-nocudalib", "-Wno-unknown-cuda-version", "-ferror-limit=0",
            "-I", str(CUDA), "-I", str(CUDA / "cccl"), "-include", "cuda_runtime.h", "-I", str(path.parent)]
    if gcc:
        args += ["-isystem", str(gcc[-1])]  # the wheel carries no clang resource headers
    for up in path.parents:
        for name in ("include", "Common", "common"):
            if (up / name).is_dir():
                args += ["-I", str(up / name)]
    args += ["--cuda-device-only", "--cuda-gpu-arch=sm_80"] if device else ["--cuda-host-only"]
    return args


def clang_file(index, path: Path, kernels: list[tuple[int, int]]) -> dict:
    """libclang's view of the kernels tree-sitter found (1-based line ranges): read in full
    when clang reports no error inside one, on either side, and no fatal error in the file."""
    import clang.cindex as ci

    out = {"ms": 0.0, "fatal": False, "kernels": len(kernels), "read": 0, "errors_in_file": 0}
    bad: set[tuple[int, int]] = set()
    for device in (False, True):
        started = time.perf_counter()
        try:
            tu = index.parse(str(path), args=clang_args(path, device))
        except ci.TranslationUnitLoadError:
            out["fatal"] = True
            continue
        out["ms"] += (time.perf_counter() - started) * 1000
        errors = [d for d in tu.diagnostics if d.severity >= ci.Diagnostic.Error]
        if any(d.severity >= ci.Diagnostic.Fatal for d in errors):
            out["fatal"] = True
        here = [d.location.line for d in errors if d.location.file is not None and Path(d.location.file.name) == path]
        out["errors_in_file"] += len(here)
        bad |= {k for k in kernels if any(k[0] <= line <= k[1] for line in here)}
    out["read"] = 0 if out["fatal"] else len(kernels) - len(bad)
    return out


def tree_sitter_file(path: Path) -> dict:
    text = path.read_text(encoding="utf-8", errors="replace")
    started = time.perf_counter()
    a = CudaAnalyzer(str(path)).analyze(text)
    ms = (time.perf_counter() - started) * 1000
    defined = [k for k in a.kernels if k.body_range is not None]
    skipped_statements = sum(1 for f in a.findings if f.code == "parse" and "skipped `" in f.message)
    return {"ms": ms, "kernels": len(defined), "read": sum(k.parse_ok for k in defined),
            "statements_skipped": skipped_statements,
            "ranges": [(k.range.start.line + 1, k.range.end.line + 1) for k in defined]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("paths", nargs="+")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    import clang.cindex as ci

    index = ci.Index.create()
    lines = ["| corpus | files | parser | kernels found | read in full | files with a fatal error | "
             "p50 ms / file | p99 ms / file | statements skipped |", "|---|---|---|---|---|---|---|---|---|"]
    for root in args.paths:
        files = sorted(f for f in Path(root).rglob("*") if f.is_file() and f.name.endswith(SUFFIXES))
        ts = [tree_sitter_file(f) for f in files]
        cl = [clang_file(index, f, t["ranges"]) for f, t in zip(files, ts)]
        name = Path(root).name
        for parser, rows in (("tree-sitter", ts), ("libclang 18", cl)):
            times = sorted(r["ms"] for r in rows)
            p99 = times[min(len(times) - 1, int(0.99 * len(times)))]
            lines.append(
                f"| {name} | {len(files)} | {parser} | {sum(r['kernels'] for r in rows)} | "
                f"{sum(r['read'] for r in rows)} | {sum(r.get('fatal', False) for r in rows)} | "
                f"{statistics.median(times):.0f} | {p99:.0f} | "
                f"{sum(r.get('statements_skipped', 0) for r in rows) if parser == 'tree-sitter' else '—'} |")
        print(lines[-2], lines[-1], sep="\n", file=sys.stderr)
    text = "\n".join(lines) + "\n"
    if args.out:
        args.out.write_text(text, encoding="utf-8")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
