"""The ``stitch`` command line: the same services the editor uses, headless.

Each subcommand lives in ``stitch_lsp/commands/<name>.py`` and exposes
``add_parser(subparsers)`` (which sets ``func``) and ``run(args) -> int``.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from pathlib import Path

from stitch_lsp import __version__

# Subcommand modules, in the order `stitch --help` lists them.
COMMANDS = ["check", "verify", "verify_kernel", "fuse", "record", "bench"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="stitch",
        description="Verified, profiled CUDA kernels from PyTorch code; checks for handwritten kernels.",
    )
    parser.add_argument("--version", action="version", version=f"stitch {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        try:
            module = importlib.import_module(f"stitch_lsp.commands.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"stitch_lsp.commands.{name}":
                raise
            continue
        module.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print("stitch: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # the user gets one line; the traceback goes to the log
        where = log_failure(args.command, exc)
        print(f"stitch {args.command}: {one_line(exc)}" + (f" (details in {where})" if where else ""),
              file=sys.stderr)
        return 1


def one_line(exc: BaseException) -> str:
    """What went wrong, in one line: the exception's own message (a WorkerDied says how the worker
    died), else its kind."""
    text = str(getattr(exc, "message", "") or exc).strip()
    first = text.splitlines()[0] if text else ""
    kind = type(exc).__name__
    said = {"WorkerDied": "the worker process died", "WorkerError": "the worker failed"}.get(kind, kind)
    return f"{said}: {first[:300]}" if first else said


def cli_log_path() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "stitch" / "cli.log"


def log_failure(command: str, exc: BaseException) -> str:
    """Append the traceback to the CLI's log; the path, or "" when it cannot be written."""
    import time
    import traceback

    path = cli_log_path()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a", encoding="utf-8") as log:
            log.write(f"--- {time.strftime('%Y-%m-%d %H:%M:%S')} stitch {command}: {sys.argv[1:]}\n")
            log.write("".join(traceback.format_exception(exc)))
    except OSError:
        return ""
    return str(path)


if __name__ == "__main__":
    sys.exit(main())
