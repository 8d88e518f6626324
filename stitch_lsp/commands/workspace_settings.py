"""Settings for a command run on a workspace: ``--trust-workspace`` and what an untrusted one may not set.

The same rule as the editor's: a workspace's ``[tool.stitch]`` may not name the
programs a command runs (``nvccPath``, ``python``, flags such as ``-ccbin``) unless
the user trusts it, with ``--trust-workspace`` or by listing the folder under
``trustedWorkspaces`` in their own config file. What was left out is said on stderr.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from stitch_lsp.settings import Built, Settings, for_workspace, user_config_path
from stitch_lsp.workspace_trust import summary


def add_trust_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--trust-workspace", action="store_true",
        help="let the workspace's [tool.stitch] choose programs (nvccPath, python, -ccbin ...); "
             "also: trustedWorkspaces in " + str(user_config_path()),
    )


def tell(built: Built, command: str) -> None:
    """Unknown keys and clamped numbers, one line each on stderr (--json output stays clean)."""
    for line in built.messages():
        print(f"stitch {command}: {line}", file=sys.stderr)


def load(root: Path, args: argparse.Namespace, command: str) -> Settings:
    built = for_workspace(root, trust=bool(getattr(args, "trust_workspace", False)))
    tell(built, command)
    if built.untrusted:  # on stderr: --json output stays clean
        print(
            f"stitch {command}: ignored settings, {summary(built.untrusted)}: the workspace {root} is not trusted. "
            f"Pass --trust-workspace, or list it under trustedWorkspaces in {user_config_path()}.",
            file=sys.stderr,
        )
    return built.settings
