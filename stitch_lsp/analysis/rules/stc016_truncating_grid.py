"""STC016: a grid size computed by truncating division, for a kernel that expects a tail.

A file-scope rule. `n / 256` blocks leave the last `n % 256` elements without a
thread. That is a bug only where the launched kernel was written for sizes that are not
a multiple of the block: it compares its index with a bound (`if (i < n)`), so rounding
the grid up is safe and covers the tail. A kernel without such a check relies on exact
multiples (rounding up would make it write out of bounds), a grid-stride kernel covers
everything whatever the grid, and a function that tests `n % 256` knows: all stay quiet.
"""

from __future__ import annotations

from typing import Callable

from stitch_lsp.analysis.rules.base import FileRule, FileView, RuleMeta
from stitch_lsp.findings import Fix, Severity, TextEdit


class TruncatingGrid(FileRule):
    meta = RuleMeta("STC016", "truncating-grid", "Grid size rounds down for a kernel that handles a partial block",
                    Severity.WARNING)
    uses = ("kernels", "launches")

    def check_file(self, view: FileView, emit: Callable[..., None]) -> None:
        if not any(l.truncations for l in view.launches):
            return
        kernels: dict[str, list] = {}
        for k in view.kernels:
            if k.body_range is not None:
                kernels.setdefault(k.name.split("::")[-1], []).append(k)
        seen = set()
        for launch in view.launches:
            if not launch.truncations:
                continue
            defs = kernels.get(launch.kernel.split("::")[-1])
            if not defs or any(k.grid_stride for k in defs):
                continue
            for t in launch.truncations:
                bounds = [_guarded_extent(k, launch.args, t) for k in defs]
                if t.range in seen or not all(bounds):
                    continue
                seen.add(t.range)  # one `dim3` serving several launches: one finding
                emit(t.range, f"grid `{t.text}` rounds down, so the last `{t.dividend} % {t.divisor}` elements "
                              f"get no thread, although `{launch.kernel}` checks its index against "
                              f"`{bounds[0]}` for a partial last block; round up with `{t.rounded_up}`",
                     Fix(title=f"Round the grid up: `{t.rounded_up}`", edits=(TextEdit(t.range, t.rounded_up),)))


def _guarded_extent(kernel, args: tuple[str, ...], t) -> str | None:
    """The argument the kernel checks its index against along the extent's axis, when the
    launch passes the extent's dividend (or one of its factors) there."""
    checked = [args[i] for i in dict(kernel.tail_bounds).get(t.axis, ()) if i < len(args)]
    whole, parts = t.factors[0], t.factors[1:]
    if whole in checked:
        return whole
    if parts and all(p in checked for p in parts):  # `i < n * c` for a grid of `n * c / 256`
        return whole
    return None


RULE = TruncatingGrid()
