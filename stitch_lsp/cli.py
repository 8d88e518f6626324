"""The ``stitch`` command line: the same services the editor uses, headless.

Each subcommand lives in ``stitch_lsp/commands/<name>.py`` and exposes
``add_parser(subparsers)`` (which sets ``func``) and ``run(args) -> int``.
"""

from __future__ import annotations

import argparse
import importlib
import sys

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


if __name__ == "__main__":
    sys.exit(main())
