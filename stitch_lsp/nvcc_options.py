"""nvcc's own option table: which options take a value, read from ``nvcc --help``.

The workspace-trust flag screen must split a flag list exactly as nvcc does, or a
value can be mistaken for a flag (``-Werror`` takes the next item as its value:
``-Werror -O3`` is ``-Werror=-O3`` to nvcc). The table is the ``--help`` output of
nvcc 13.0, checked in as data (``stitch_lsp/data/nvcc-13.0-help.txt``); regenerate
it with ``nvcc --help`` when a new release adds options.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path

from attrs import frozen

HELP_FILE = Path(__file__).with_name("data") / "nvcc-13.0-help.txt"
# `--long <value>   (-short)`: the option lines of the help text.
_LINE = re.compile(r"^(--[\w+-]+)(.*?)\s{2,}\(?(-[\w+-]+)\)?\s*$")
# Options whose help line shows no value but whose text says they take one.
_TAKES_VALUE_ANYWAY = {"--qpp-config"}


@frozen
class NvccOption:
    long: str  # "--compiler-bindir"
    short: str  # "-ccbin"
    value: str  # what it takes ("<path>", "{true|false}", "<kind>,..."), "" for none


@functools.cache
def table() -> dict[str, NvccOption]:
    """Every option by its long and its short name."""
    out: dict[str, NvccOption] = {}
    for line in HELP_FILE.read_text(encoding="utf-8").splitlines():
        m = _LINE.match(line)
        if not m:
            continue
        long, value, short = m.group(1), m.group(2).strip(), m.group(3)
        if not value and long in _TAKES_VALUE_ANYWAY:
            value = "<value>"
        option = NvccOption(long, short, value)
        out.setdefault(long, option)
        out.setdefault(short, option)
    return out


def takes_value(name: str) -> bool:
    """Does the option ``name`` (as written, without ``=value``) take a value, so that nvcc reads
    the next item as it when none is attached?"""
    option = table().get(name)
    return bool(option and option.value)


def known(name: str) -> bool:
    return name in table()
