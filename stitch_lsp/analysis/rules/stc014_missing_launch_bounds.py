"""STC014: a kernel launched with 512+ threads per block but without `__launch_bounds__`."""

from __future__ import annotations

from typing import Callable

from stitch_lsp.analysis.rules.base import FileRule, FileView, RuleMeta
from stitch_lsp.findings import Fix, Range, Severity, TextEdit

REGISTERS_PER_SM = 65536
# Below this many threads per block every register count the compiler may pick still fits.
MIN_THREADS = 512


class MissingLaunchBounds(FileRule):
    meta = RuleMeta("STC014", "missing-launch-bounds",
                    "Large constant block size without `__launch_bounds__`", Severity.HINT)
    uses = ("kernels", "launches")

    def check_file(self, view: FileView, emit: Callable[..., None]) -> None:
        # Only launches with a large constant block can matter; there are few of those.
        large: dict[str, int] = {}
        for launch in view.launches:
            n = launch.block_threads
            if n is not None and MIN_THREADS <= n <= 1024:
                name = launch.kernel.split("::")[-1]
                large[name] = max(n, large.get(name, 0))
        if not large:
            return
        for k in view.kernels:
            if k.name not in large or k.launch_bounds is not None or k.body_range is None:
                continue
            size = large[k.name]
            at = k.name_range.start
            emit(k.name_range,
                 f"`{k.name}` is launched with {size} threads per block but has no `__launch_bounds__`; should the "
                 f"compiler give it more than {REGISTERS_PER_SM // size} registers per thread, the launch fails "
                 f"with 'too many resources requested' (ptxas's register count on save tells). "
                 f"`__launch_bounds__({size})` makes the compiler keep within it",
                 Fix(title=f"Add `__launch_bounds__({size})`",
                     edits=(TextEdit(Range(at, at), f"__launch_bounds__({size}) "),)))


RULE = MissingLaunchBounds()
