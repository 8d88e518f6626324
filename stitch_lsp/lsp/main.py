"""Entry point of ``stitch-lsp`` / ``python -m stitch_lsp`` (the server helper fills this in)."""

import sys


def main(argv: list[str] | None = None) -> int:
    print("stitch-lsp: server not built yet", file=sys.stderr)
    return 1
