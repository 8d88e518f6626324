"""The sizes the memory plan needs, from a run of the reference on the ``meta`` device.

Meta tensors have shapes, dtypes and storages but no memory and no compute, so a
4096 x 393216 task costs nothing here. A dispatch mode follows every storage the
forward creates (and when Python frees it), which gives the most bytes live at once
inside the forward: an eager ``relu(x) * 2`` holds two outputs' worth at its peak, a
softmax one.
"""

from __future__ import annotations

import contextlib
import weakref
from types import ModuleType
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from stitch_lsp.contract.memory_plan import TaskSizes
from stitch_lsp.worker import inputs as inp

_FLOAT = (torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.complex64, torch.complex128)


def _storage(t: torch.Tensor) -> tuple[int, int] | None:
    try:
        storage = t.untyped_storage()
        return storage._cdata, storage.nbytes()
    except Exception:  # tensor subclasses without a plain storage
        return None


class _LiveBytes(TorchDispatchMode):
    """Bytes of storages created under this mode and still referenced, and their peak."""

    def __init__(self, known: set[int]) -> None:
        super().__init__()
        self.known = known
        self.live: dict[int, int] = {}
        self.current = 0
        self.peak = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        out = func(*args, **(kwargs or {}))
        for value in tree_flatten(out)[0]:
            if isinstance(value, torch.Tensor):
                self._track(value)
        return out

    def _track(self, t: torch.Tensor) -> None:
        found = _storage(t)
        if found is None:
            return
        key, nbytes = found
        if key in self.known or key in self.live:
            return
        self.live[key] = nbytes
        self.current += nbytes
        self.peak = max(self.peak, self.current)
        # A view keeps its base alive (``_base``), so the tensor that made a storage outlives
        # every view of it: its death is the storage's.
        weakref.finalize(t, self._free, key)

    def _free(self, key: int) -> None:
        self.current -= self.live.pop(key, 0)


def _unique_bytes(values: list[Any]) -> tuple[int, int, set[int]]:
    """(bytes, floating-point bytes, storage keys) of the tensors among ``values``."""
    total = floating = 0
    keys: set[int] = set()
    for v in values:
        if not isinstance(v, torch.Tensor):
            continue
        found = _storage(v)
        if found is None:
            n = v.numel() * v.element_size()
            total += n
            floating += n if v.dtype in _FLOAT else 0
            continue
        key, n = found
        if key in keys:
            continue
        keys.add(key)
        total += n
        floating += n if v.dtype in _FLOAT else 0
    return total, floating, keys


def _meta_forward(model: Any, values: list[Any], held: set) -> tuple[Any, int]:
    """The forward's output on the meta device and the peak bytes live meanwhile. A recurrent module runs as
    the one call it is on a GPU (its shapes only): its cell once per step took half a minute on an LSTM of
    512 steps. Should that call fail here, the module runs as written."""
    from stitch_lsp.worker.recurrent_ops import has_recurrent_module, recurrent_as_library_calls

    if isinstance(model, torch.nn.Module) and has_recurrent_module(model):
        try:
            return _meta_run(model, values, held, recurrent_as_library_calls())
        except Exception:  # noqa: BLE001 - run as written below
            pass
    return _meta_run(model, values, held, contextlib.nullcontext())


def _meta_run(model: Any, values: list[Any], held: set, calls: Any) -> tuple[Any, int]:
    tracker = _LiveBytes(held)
    with torch.device("meta"), torch.no_grad(), calls, tracker:
        return model(*values), tracker.peak


def task_sizes(ref: ModuleType) -> tuple[TaskSizes | None, str]:
    """Sizes at the module's current globals; (None, why) when not even the inputs trace."""
    try:
        with torch.device("meta"):
            inp.seed_everything(0)
            init = list(ref.get_init_inputs())
            values = list(ref.get_inputs())
    except Exception as exc:  # noqa: BLE001 - user code: the reason goes into the plan
        return None, f"get_inputs() does not run on the meta device ({type(exc).__name__}: {exc})"
    in_bytes, in_float, in_keys = _unique_bytes(values)
    try:
        with torch.device("meta"):
            model = ref.Model(*init)
        state = list(model.state_dict().values()) if isinstance(model, torch.nn.Module) else []
    except Exception as exc:  # noqa: BLE001
        guess = TaskSizes(input_bytes=in_bytes, output_bytes=in_bytes, forward_peak_bytes=2 * in_bytes,
                          float_input_bytes=in_float, float_output_bytes=in_bytes, traced=False)
        return guess, f"Model(...) does not build on the meta device ({type(exc).__name__}: {exc}); outputs guessed"
    p_bytes, p_float, p_keys = _unique_bytes(state)
    try:
        out, peak = _meta_forward(model, values, in_keys | p_keys)
        outs = [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)]
        o_bytes, o_float, _ = _unique_bytes(outs)
    except Exception as exc:  # noqa: BLE001 - data-dependent ops (nonzero, .item()) do not run on meta
        guess = TaskSizes(input_bytes=in_bytes, output_bytes=in_bytes, forward_peak_bytes=2 * in_bytes,
                          param_bytes=p_bytes, float_input_bytes=in_float, float_output_bytes=in_bytes,
                          float_param_bytes=p_float, traced=False)
        return guess, (f"the reference's forward does not run on the meta device ({type(exc).__name__}: "
                       f"{str(exc)[:160]}); outputs guessed from the inputs")
    return TaskSizes(input_bytes=in_bytes, output_bytes=o_bytes, forward_peak_bytes=max(peak, o_bytes),
                     param_bytes=p_bytes, float_input_bytes=in_float, float_output_bytes=o_float,
                     float_param_bytes=p_float, output_tensor_bytes=[t.numel() * t.element_size() for t in outs],
                     input_tensor_bytes=[v.numel() * v.element_size() for v in values
                                         if isinstance(v, torch.Tensor)]), ""
