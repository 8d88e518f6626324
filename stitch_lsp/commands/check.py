"""``stitch check PATH...``: the findings the editor shows for .cu / .cuh files.

Static rules, nvcc's errors and warnings, ptxas errors and spills, and each
kernel's registers / shared memory / spills. Exit status: 1 when there are
errors, 0 otherwise, 2 for usage errors (a path that does not exist, no files).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from stitch_lsp.findings import Severity
from stitch_lsp.serde import to_dict
from stitch_lsp.commands.workspace_settings import add_trust_flag, load, tell
from stitch_lsp.settings import Settings, with_overrides

SUFFIXES = (".cu", ".cuh")
_SEVERITY = {Severity.ERROR: "error", Severity.WARNING: "warning", Severity.INFO: "info", Severity.HINT: "hint"}


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "check",
        help="static rules, nvcc diagnostics and kernel resources for .cu/.cuh files",
        description=__doc__.split("\n\n")[0].split("``", 2)[-1].strip(": ") if __doc__ else None,
    )
    p.add_argument("paths", nargs="+", metavar="PATH", help=".cu / .cuh files or directories (searched recursively)")
    p.add_argument("--json", action="store_true", help="print JSON instead of text")
    p.add_argument("--no-compile", action="store_true", help="static rules only; do not run nvcc")
    p.add_argument("--arch", help="GPU architecture for nvcc, e.g. sm_90 (default: the GPU's, else sm_90)")
    p.add_argument("--nvcc", dest="nvcc_path", help="the nvcc to use (default: nvcc on PATH)")
    p.add_argument("-I", dest="include_paths", action="append", default=[], metavar="DIR", help="include path")
    p.add_argument("--timeout", type=float, help="seconds nvcc may take per file")
    add_trust_flag(p)
    p.set_defaults(func=run)


def collect(paths: list[str]) -> tuple[list[Path], list[str]]:
    files: list[Path] = []
    problems: list[str] = []
    for raw in paths:
        p = Path(raw)
        if p.is_dir():
            found = []
            for dirpath, dirnames, filenames in os.walk(p):
                dirnames[:] = sorted(d for d in dirnames if not d.startswith(".") and d != "node_modules")
                found += [Path(dirpath) / f for f in sorted(filenames) if f.lower().endswith(SUFFIXES)]
            if not found:
                problems.append(f"{raw}: no .cu or .cuh files here")
            files += found
        elif p.is_file():
            if not p.name.lower().endswith(SUFFIXES):
                problems.append(f"{raw}: not a .cu or .cuh file")
            else:
                files.append(p)
        else:
            problems.append(f"{raw}: no such file or directory")
    return files, problems


def settings_for(args: argparse.Namespace) -> Settings:
    settings = load(Path.cwd(), args, "check")
    overrides = {}
    if args.arch:
        overrides["arch"] = args.arch
    if args.nvcc_path:
        overrides["nvcc_path"] = args.nvcc_path
    if args.include_paths:
        overrides["include_paths"] = list(settings.include_paths) + [str(Path(i).resolve()) for i in args.include_paths]
    if args.timeout is not None:
        overrides["compile_timeout_s"] = args.timeout
    built = with_overrides(settings, overrides)
    tell(built, "check")
    return built.settings


def run(args: argparse.Namespace) -> int:
    from stitch_lsp.commands.check_output import kernel_lines, unique_findings
    from stitch_lsp.verify.cuda_check import check_file

    files, problems = collect(args.paths)
    for problem in problems:
        print(f"stitch check: {problem}", file=sys.stderr)
    if problems and not files:
        return 2
    settings = settings_for(args)
    results = []
    told: set[str] = set()
    def check(path: Path):
        try:
            return check_file(path, settings, compile=not args.no_compile, root=Path.cwd())
        except OSError as exc:
            return exc

    # nvcc is the slow part and runs in its own processes: compile a few files at once,
    # report in the order the files were named.
    workers = 1 if args.no_compile else max(1, min(4, os.cpu_count() or 1, len(files)))
    with ThreadPoolExecutor(workers) as pool:
        outcomes = list(pool.map(check, files))
    for path, result in zip(files, outcomes):
        if isinstance(result, OSError):
            print(f"stitch check: {path}: {result.strerror or result}", file=sys.stderr)
            problems.append(str(path))
            continue
        results.append(result)
        if args.json:
            continue
        if result.skipped:
            print(f"{result.path}: skipped: {result.skipped}", file=sys.stderr)
            continue
        for note in result.notes:
            print(f"{result.path}: note: {note}", file=sys.stderr)
        for f in unique_findings(result.findings):
            line, col = f.range.start.line + 1, f.range.start.character + 1
            code = f" {f.code}" if f.code else ""
            message = f.message.replace("\n", " ")
            print(f"{f.path}:{line}:{col}: {_SEVERITY[f.severity]}{code} {message}")
            for extra in f.related:
                print(f"    {extra}")
        for k, label in kernel_lines(result.kernels):
            where = f"{result.path}:{k.line + 1}" if k.line is not None else result.path
            print(f"{where}: kernel {k.name} {label}")
        if result.compile_status not in ("ok", "failed", "skipped") and result.compile_message:
            key = result.compile_status
            if key not in told or key != "missing":
                print(f"stitch check: {result.compile_message}", file=sys.stderr)
                told.add(key)
    errors = sum(1 for r in results for f in unique_findings(r.findings) if f.severity is Severity.ERROR)
    warnings = sum(1 for r in results for f in unique_findings(r.findings) if f.severity is Severity.WARNING)
    if args.json:
        print(
            json.dumps(
                {
                    "files": [
                        {
                            "path": r.path,
                            "skipped": r.skipped or None,
                            "notes": r.notes,
                            "findings": [to_dict(f) for f in unique_findings(r.findings)],
                            "kernels": [to_dict(k) for k in r.kernels],
                            "compile": {
                                "status": r.compile_status,
                                "message": r.compile_message,
                                "arch": r.arch,
                                "seconds": round(r.compile_seconds, 3),
                            },
                        }
                        for r in results
                    ],
                    "errors": errors,
                    "warnings": warnings,
                },
                indent=2,
            )
        )
    else:
        sys.stdout.flush()
        checked = sum(1 for r in results if not r.skipped)
        print(f"{checked} file(s) checked: {errors} error(s), {warnings} warning(s)", file=sys.stderr)
    return 1 if errors else 0
