"""``stitch record [--workspace DIR] -- COMMAND [ARGS...]``: run your program once and record shapes.

For the workspace's own files, what each function and method sees (tensor shapes,
dtypes, devices and strides, int / float / bool scalars, config objects) is kept
under ``.stitch/recordings/``, one file per function; ``stitch fuse`` and the
editor take shapes from there first. The command runs as you typed it, with your
environment; it is your program, so no workspace setting is involved.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("record", help="run your program once and record the shapes its functions see",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workspace", type=Path, default=None,
                   help="the folder whose files are recorded (default: the current folder)")
    p.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND [ARGS...], e.g. -- python train.py")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from stitch_lsp.recording.run import record

    command = list(args.command)
    if command[:1] == ["--"]:
        command = command[1:]
    if not command:
        print("stitch record: give the command to run after --, e.g. stitch record -- python train.py",
              file=sys.stderr)
        return 2
    root = (args.workspace or Path.cwd()).resolve()
    if not root.is_dir():
        print(f"stitch record: {root} is not a folder", file=sys.stderr)
        return 2
    try:
        result = record(command, root)
    except KeyboardInterrupt:  # the program got the interrupt too; what it recorded before exiting is kept
        print("stitch record: interrupted", file=sys.stderr)
        return 130
    print(f"stitch record: {result.message}", file=sys.stderr)
    if not result.functions:
        return 1
    return 0 if result.returncode == 0 else 1
