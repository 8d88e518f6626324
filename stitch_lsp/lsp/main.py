"""Entry point of ``stitch-lsp`` and ``python -m stitch_lsp``.

stdio by default (stdout carries the protocol, so logs go to stderr or
``--log-file``); ``--tcp HOST:PORT`` listens instead.
"""

from __future__ import annotations

import argparse
import gc
import logging
import sys

from stitch_lsp import __version__
from stitch_lsp.lsp.log_flood import FloodFilter


def _host_port(value: str) -> tuple[str, int]:
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit():
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, got {value!r}")
    return host or "127.0.0.1", int(port)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="stitch-lsp", description="The Stitch language server.")
    parser.add_argument("--version", action="version", version=f"stitch-lsp {__version__}")
    parser.add_argument("--stdio", action="store_true", help="talk over stdin/stdout (the default)")
    parser.add_argument("--tcp", type=_host_port, metavar="HOST:PORT", help="listen on a TCP port instead of stdio")
    parser.add_argument("--log-file", metavar="PATH", help="write the server log here (default: stderr)")
    parser.add_argument(
        "--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"], help="log detail"
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    handler: logging.Handler
    if args.log_file:
        handler = logging.FileHandler(args.log_file, encoding="utf-8")
    else:
        handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    # A client sending thousands of bad messages must not turn into thousands of log lines.
    handler.addFilter(FloodFilter())
    root = logging.getLogger()
    root.addHandler(handler)
    root.setLevel(args.log_level)
    # pygls logs every message at INFO; keep the log about Stitch.
    logging.getLogger("pygls").setLevel(max(logging.WARNING, root.level))

    # Importing the server creates tens of thousands of long-lived objects (lsprotocol's classes):
    # collecting cycles among them while they are made only slows the start (about 10 %).
    gc.disable()
    from stitch_lsp.lsp.server import create_server

    server = create_server()
    # Everything imported so far lives as long as the process: keep the cyclic GC from
    # rescanning it on every full collection (pauses a user would feel as latency).
    gc.freeze()
    gc.enable()
    if args.tcp:
        host, port = args.tcp
        server.start_tcp(host, port)
    else:
        server.start_io()
    return 0


if __name__ == "__main__":
    sys.exit(main())
