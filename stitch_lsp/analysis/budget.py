"""A time budget for the static analysis of each function, so no text can stall the server.

``analyze_cuda(text, path, budget_s=...)`` sets the budget for its thread; the long
loops of the analysis (the facts query, the rules, each function) ask
``spent()`` / ``check()`` as they go. Each function has the budget to itself.
Past its deadline, or on an expression nested deeper than the parser's queries can
take (``check_depth``), the function stops with ``OverBudget`` and gets a hint
instead of findings ("static rules stopped at line N: expression too large");
the other functions are analysed as usual. (tree-sitter's own query progress callback would be the
natural place to stop a long query, but py-tree-sitter 0.26 crashes with one.)
"""

from __future__ import annotations

import contextlib
import threading
import time
from typing import Any, Iterator

_state = threading.local()


# Deeper than this (an expression of tens of thousands of chained operators), tree-sitter's query
# cursor stops working (its states count depth in 16 bits: matches go missing, and matching turns
# quadratic); such a function is not analysed.
MAX_DEPTH = 60_000


class OverBudget(Exception):
    """The analysis of the current text ran past its time budget, or met what it cannot take.
    ``row``: the 0-based line where it stopped, when known."""

    def __init__(self, row: int | None = None) -> None:
        super().__init__(row)
        self.row = row


@contextlib.contextmanager
def budget(seconds: float | None) -> Iterator[None]:
    """Within this block, each function analysed on this thread (``function()``) stops after
    ``seconds`` (None: never). Per function, so a large file of ordinary kernels is analysed in
    full however long it takes, while no one expression can hold the analysis."""
    previous = getattr(_state, "per_function", None)
    _state.per_function = seconds
    try:
        yield
    finally:
        _state.per_function = previous


@contextlib.contextmanager
def function() -> Iterator[None]:
    """The analysis of one function: its deadline starts now."""
    seconds = getattr(_state, "per_function", None)
    previous = getattr(_state, "deadline", None)
    _state.deadline = None if seconds is None else time.monotonic() + max(0.0, seconds)
    try:
        yield
    finally:
        _state.deadline = previous


def spent() -> bool:
    deadline = getattr(_state, "deadline", None)
    return deadline is not None and time.monotonic() > deadline


def check() -> None:
    if spent():
        raise OverBudget()


def check_depth(node: Any, limit: int = MAX_DEPTH) -> None:
    """Raise ``OverBudget`` at the first node deeper than ``limit`` below ``node`` (a tree-sitter
    Node). Free for all but very large functions: depth never exceeds the descendant count."""
    if node.descendant_count <= limit:
        return
    cursor = node.walk()
    depth = 0
    while True:
        if cursor.goto_first_child():
            depth += 1
            if depth > limit:
                raise OverBudget(cursor.node.start_point.row)
            continue
        while not cursor.goto_next_sibling():
            if depth == 0 or not cursor.goto_parent():
                return
            depth -= 1
