"""Poisoning the CUDA caching allocator, so a kernel that never writes its output cannot
pass by returning what an earlier run left in recycled memory."""

from __future__ import annotations

import torch

POISON_BYTE = 0xFF  # every float type reads 0xFF.. as NaN; integers read -1


def poison_cached_blocks(max_blocks: int = 4096) -> int:
    """Fill every free block the caching allocator holds with 0xFF; returns bytes poisoned.

    Allocating exactly a free block's size hands out that block (best fit), so
    holding one tensor per free block, filling and dropping them, paints them all.
    """
    if not torch.cuda.is_available():
        return 0
    try:
        snapshot = torch.cuda.memory_snapshot()
    except Exception:
        return 0
    sizes = []
    for segment in snapshot:
        for block in segment.get("blocks", []):
            if block.get("state") == "inactive":
                sizes.append(int(block.get("size", 0)))
    held = []
    poisoned = 0
    for size in sorted(sizes, reverse=True)[:max_blocks]:
        if size <= 0:
            continue
        try:
            t = torch.empty(size, dtype=torch.uint8, device="cuda")
        except torch.cuda.OutOfMemoryError:
            break
        t.fill_(POISON_BYTE)
        held.append(t)
        poisoned += size
    torch.cuda.synchronize()
    del held
    return poisoned


def fresh_poisoned_pool(sizes_bytes: list[int]) -> int:
    """Allocate (and free) poisoned blocks of the sizes the outputs will need, then poison the rest."""
    if not torch.cuda.is_available():
        return 0
    held = []
    total = 0
    for size in sizes_bytes:
        try:
            t = torch.empty(max(1, size), dtype=torch.uint8, device="cuda")
        except torch.cuda.OutOfMemoryError:
            break
        t.fill_(POISON_BYTE)
        held.append(t)
        total += size
    torch.cuda.synchronize()
    del held
    return total + poison_cached_blocks()
