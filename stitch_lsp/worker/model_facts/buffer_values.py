"""What a model's mask buffers hold, for the Planner: tracing on the meta device keeps no values.

A causal mask is usually a buffer (``register_buffer("bias", torch.tril(torch.ones(n, n)))``); the
Planner may call PyTorch's fused attention with ``is_causal`` only where it knows the buffer is that
triangle. The model is built once more on the CPU (same seed, the caller's random state untouched)
and each square-ended buffer is classified. Skipped for models whose state is large: building
them costs memory and seconds, and the attention then stays as the reference wrote it.
"""

from __future__ import annotations

from typing import Any

import torch

MAX_STATE_BYTES = 1 << 30  # larger models are not built again (their masks stay unknown)
LOWER, STRICT_UPPER = "lower", "strict_upper"


def _candidates(model: torch.nn.Module) -> list[str]:
    return [name for name, b in model.named_buffers()
            if b.dim() >= 2 and b.shape[-1] >= 2 and b.shape[-2] >= 2 and b.shape[-1] == b.shape[-2]]


def _state_bytes(model: torch.nn.Module) -> int:
    tensors = list(model.parameters()) + list(model.buffers())
    return sum(t.numel() * t.element_size() for t in tensors)


def triangle(values: torch.Tensor) -> str:
    """LOWER / STRICT_UPPER when every trailing 2-D slab of ``values`` is nonzero exactly on and below
    the diagonal / exactly above it; "" otherwise."""
    if values.dim() < 2 or values.is_complex():
        return ""
    rows, cols = values.shape[-2:]
    nonzero = values != 0
    lower = torch.ones(rows, cols, dtype=torch.bool, device=values.device).tril()
    if bool((nonzero == lower).all()):
        return LOWER
    if bool((nonzero == ~lower).all()):
        return STRICT_UPPER
    return ""


def buffer_triangles(make_model: Any, meta_model: torch.nn.Module) -> dict[str, str]:
    """Buffer path -> LOWER / STRICT_UPPER for the square-ended buffers of a model ``make_model()`` builds
    (on the CPU), where ``meta_model`` (the same model on the meta device) says there are any."""
    names = _candidates(meta_model)
    if not names or _state_bytes(meta_model) > MAX_STATE_BYTES:
        return {}
    try:
        with torch.random.fork_rng(devices=[]), torch.device("cpu"), torch.no_grad():
            torch.manual_seed(0)
            model = make_model()
            buffers = dict(model.named_buffers())
            found = {name: triangle(buffers[name]) for name in names if name in buffers}
    except Exception:  # noqa: BLE001 - a model that does not build on the CPU: its masks stay unknown
        return {}
    return {name: kind for name, kind in found.items() if kind}
