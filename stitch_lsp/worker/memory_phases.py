"""The memory plan on the device: making it from the meta trace, and keeping to it phase by phase.

Between phases every tensor of the last one is gone and the caching allocator's
blocks go back to the driver, then blocks the size of one input set and one set of
outputs are taken, poisoned (0xFF: NaN) and freed again, so the next outputs land in
poisoned memory rather than in whatever the driver hands back. Each phase's peak is
measured.
"""

from __future__ import annotations

from contextlib import contextmanager
from types import ModuleType
from typing import Iterator

import torch

from stitch_lsp.verdict import MemoryPlan
from stitch_lsp.contract import memory_plan as mp
from stitch_lsp.contract.verify import VerifyOptions
from stitch_lsp.worker import inputs as inp
from stitch_lsp.worker.footprint import task_sizes
from stitch_lsp.worker.poison import fresh_poisoned_pool


def odd_sizes(ref: ModuleType, source: str) -> mp.TaskSizes | None:
    """Sizes at the second shape the Verifier will try first (every size odd and larger)."""
    options = inp.odd_shape_candidates(inp.size_globals(ref, source))
    for option in options[:2]:
        restore = inp.with_globals(ref, option, source)
        try:
            sizes, _ = task_sizes(ref)
        finally:
            restore()
        if sizes is not None and sizes.traced:
            return sizes
    return None


def make_plan(ref: ModuleType, source: str, opts: VerifyOptions, *, cuda: bool,
              timing: bool) -> tuple[MemoryPlan, mp.TaskSizes | None]:
    limit = int(opts.memory_limit_gib * mp.GiB) if opts.memory_limit_gib is not None else None
    sizes, why = task_sizes(ref)
    if sizes is None:
        return MemoryPlan(status="skipped", message=f"no memory plan: {why}"), None
    if not cuda and limit is None:
        return MemoryPlan(status="skipped", traced=sizes.traced, input_bytes=sizes.input_bytes,
                          output_bytes=sizes.output_bytes, forward_peak_bytes=sizes.forward_bytes,
                          param_bytes=sizes.param_bytes, message="CPU test mode: no device memory to plan"), sizes
    odd = odd_sizes(ref, source) if opts.second_shape else None
    if cuda:
        configure_allocator()
        torch.cuda.empty_cache()
        free, total = torch.cuda.mem_get_info()
        reserve = None
    else:  # CPU test mode with a cap: the cap is the whole device
        free = total = limit or 0
        reserve = 0
    plan = mp.plan_memory(sizes, total_bytes=total, free_bytes=free, odd=odd, timing=timing,
                          compile_baseline=opts.compile_baseline and cuda, accuracy=True, limit_bytes=limit,
                          reserve=reserve)
    if why:
        plan.message += f"; {why}"
    return plan, sizes


# Blocks over this size are not split for smaller requests (where the allocator takes the
# setting at run time): the comparison's slices and other temporaries then cannot break up
# an input- or output-sized block that the next trial needs whole. Freed blocks of other
# large sizes stay cached meanwhile; the allocator returns them when an allocation fails.
MAX_SPLIT_MB = 512


def configure_allocator() -> None:
    setting = f"max_split_size_mb:{MAX_SPLIT_MB}"
    setter = getattr(torch._C, "_accelerator_setAllocatorSettings", None)
    try:
        if setter is not None:
            setter(setting)
        else:
            torch.cuda.memory._set_allocator_settings(setting)
    except Exception:  # noqa: BLE001 - an allocator without the setting: fragmentation costs a little room
        pass


class PhaseMemory:
    """Runs the phases of one job inside the plan and records what each used."""

    def __init__(self, plan: MemoryPlan, block_sizes: list[int], *, cuda: bool) -> None:
        self.plan = plan
        self.block_sizes = block_sizes
        self.cuda = cuda
        self.current = ""
        if cuda:
            torch.cuda.reset_peak_memory_stats()

    def release(self) -> None:
        if not self.cuda:
            return
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        fresh_poisoned_pool(self.block_sizes)

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        self.release()
        if self.cuda:
            torch.cuda.reset_peak_memory_stats()
        self.current = name
        try:
            yield
        finally:
            if self.cuda:
                self.record(name)
            self.current = ""

    @contextmanager
    def within(self, name: str) -> Iterator[None]:
        """A planned step inside the current phase, its tensors alive (nothing released): what it
        uses is recorded as its own, and the phase's record keeps what came before and after."""
        outer = self.current
        if self.cuda and outer:
            self.record(outer)
            torch.cuda.reset_peak_memory_stats()
        try:
            yield
        finally:
            if self.cuda:
                self.record(name)
                torch.cuda.reset_peak_memory_stats()

    def record(self, name: str) -> None:
        reserved = torch.cuda.max_memory_reserved()
        allocated = torch.cuda.max_memory_allocated()
        found = mp.phase(self.plan, name)
        if found is not None:
            found.peak_bytes = max(found.peak_bytes or 0, reserved)
        self.plan.peak_bytes = max(self.plan.peak_bytes or 0, reserved)
        self.plan.peak_allocated_bytes = max(self.plan.peak_allocated_bytes or 0, allocated)
