"""What the LLM Coder sends: a stable, cached prefix, then the plan and each round's feedback.

Request layout (the order matters for prompt caching, which matches prefixes):

    system:   [format and rules] [CUDA skills guide]  ← cache breakpoint 1
    user:     [the task: reference, shapes]           ← cache breakpoint 2
              [the plan] [what to do]
    assistant:[candidate, round 1]
    user:     [Verifier feedback, round 1]            ← breakpoint 3 (moves to the newest turn)
    ...

The first two breakpoints never change within a job (or across jobs on the same
task), so every round after the first reads them from the cache; the third lets
round N+1 read all of round N's conversation from the cache.
"""

from __future__ import annotations

from typing import Any

from stitch_lsp.pipeline import Plan, Task
from stitch_lsp.skills import cuda_guide

KERNEL_FILE = "kernel.cu"

CACHE = {"type": "ephemeral"}

# How a candidate's binding loads its CUDA: the one place that names the loader's API
# (stitch_lsp.runtime.loader: NVRTC, compiled once per process, cached by content hash).
LOADER_USAGE = f'''\
from pathlib import Path

import torch
import torch.nn as nn

from stitch_lsp.runtime.loader import load_kernel

_SOURCE = Path(__file__).with_name("{KERNEL_FILE}").read_text()
# One load_kernel per __global__ function you launch; compile errors cite {KERNEL_FILE}.
_scale_add = load_kernel(_SOURCE, "scale_add_kernel", filename="{KERNEL_FILE}")


class ModelNew(nn.Module):
    def __init__(self, alpha):  # the same signature as Model.__init__
        super().__init__()
        self.alpha = alpha  # parameters / buffers exactly as Model creates them

    def forward(self, x, y):  # the same signature as Model.forward
        x, y = x.contiguous(), y.contiguous()
        out = torch.empty_like(x)
        n = x.numel()
        threads = 256
        blocks = max(1, min((n + threads - 1) // threads, 132 * 16))
        # Arguments are checked against the kernel's parameter list: tensors for pointers
        # (dtype must match), Python numbers for float / int / int64_t parameters.
        _scale_add(grid=(blocks,), block=(threads,), args=[x, y, out, self.alpha, n])
        return out
'''

SYSTEM_RULES = f"""\
You are the Coder in Stitch, a kernel-engineering tool. You write CUDA kernels that
replace a PyTorch reference (KernelBench format: `class Model`, `get_inputs()`,
`get_init_inputs()`) with `class ModelNew`: same constructor and forward
signatures, same outputs within dtype tolerances, faster. A Verifier compiles your
code, checks it on fresh, adversarial and odd-shaped inputs, times it against
eager PyTorch and torch.compile, profiles it with Nsight Compute and checks for
cheating; its findings come back to you and you refine.

# Reply format (exactly this; anything else wastes the round)

1. At most 12 lines of plain prose: your plan (which kernels, which thread does what,
   what you changed since the last round and why).
2. Exactly one ```cuda block: the complete CUDA source, saved as `{KERNEL_FILE}` next to
   the Python module and compiled with NVRTC for the GPU (sm_90 on an H100). Device
   code only: `extern "C" __global__` kernels and `__device__` helpers. No host code,
   no `main`, no PyTorch / pybind11 headers and no standard C++ headers; math
   functions (`expf`, `erff`, `fmaxf`, ...) need no include; `<cuda_fp16.h>` and
   `<cuda_bf16.h>` are available. Launch configuration is decided in Python.
3. Exactly one ```python block: the complete Python module defining `ModelNew`,
   loading the CUDA with `stitch_lsp.runtime.loader.load_kernel` like this:

```python
{LOADER_USAGE}```

No other code blocks (no shell, no C++ outside the ```cuda block, no second Python
block, no diff: always the whole files). The Python module may import only torch,
the Python standard library and `stitch_lsp.runtime.loader`.

# Rules
- Do the computation in your CUDA; PyTorch in `forward` only allocates, checks,
  reshapes and launches (see the guide's "What counts as cheating").
- Handle every shape and stride the reference accepts; sizes come from the tensors.
- Keep the reference's dtype and numerics, NaN/Inf behaviour included.
- Follow the plan you are given unless the feedback shows it cannot work; then say why.
- Fix what the Verifier reports first, before optimising further.
"""


def system_blocks() -> list[dict[str, Any]]:
    """The stable system prompt: rules then the skills guide, cached as one prefix."""
    return [
        {"type": "text", "text": SYSTEM_RULES},
        {"type": "text", "text": "# CUDA skills guide\n\n" + cuda_guide(), "cache_control": CACHE},
    ]


def task_text(task: Task) -> str:
    lines = [f"# Task: {task.name}", ""]
    if task.inputs:
        shapes = ", ".join(f"{'x'.join(map(str, spec.shape)) or 'scalar'} {spec.dtype}" for spec in task.inputs)
        lines += [f"Inputs (from {task.shape_source or 'the task'}): {shapes}", ""]
    lines += ["Reference (PyTorch):", "```python", task.source.rstrip(), "```"]
    return "\n".join(lines)


def plan_text(plan: Plan | None) -> str:
    if plan is None or not plan.groups:
        return "# Plan\n\nNo plan was made for this task: decompose it yourself and state your plan."
    lines = ["# Plan (from Stitch's Planner)", ""]
    if plan.device_name:
        lines.append(
            f"Device: {plan.device_name}; floors computed with {plan.bandwidth_gbs:.0f} GB/s and "
            f"{plan.peak_tflops:.0f} TFLOP/s."
        )
    if plan.eager_kernels:
        lines.append(f"Eager PyTorch launches {plan.eager_kernels} kernels for this task.")
    for number, group in enumerate(plan.groups, 1):
        lines.append(
            f"{number}. {group.kind}: {' → '.join(group.ops) or '(ops not listed)'}"
            f" | in: {', '.join(group.inputs) or '-'} | out: {', '.join(group.outputs) or '-'}"
            f" | must move {group.bytes_moved / 1e6:.2f} MB, {group.flops / 1e9:.3f} GFLOP"
            f" | floor {group.floor_us:.1f} µs"
            + (f" | note: {group.note}" if group.note else "")
        )
    if plan.floor_us:
        lines.append(f"Whole task floor: {plan.floor_us:.1f} µs.")
    if plan.predicted_speedup:
        lines.append(f"Predicted speedup if each group runs at its floor: {plan.predicted_speedup:.2f}x over eager.")
    lines += [f"Planner note: {note}" for note in plan.notes]
    return "\n".join(lines)


def first_turn(task: Task, plan: Plan | None, *, target_speedup: float, rounds: int,
               history_digest: str = "") -> dict[str, Any]:
    """The opening user message: cached task, then plan and instructions."""
    ask = [
        f"Write ModelNew for this task. Target: at least {target_speedup:g}x over eager PyTorch, "
        f"correct on every trial, no cheating. You have up to {rounds} rounds with the Verifier's feedback.",
    ]
    if history_digest:
        ask.insert(0, history_digest)
    return {
        "role": "user",
        "content": [
            {"type": "text", "text": task_text(task), "cache_control": CACHE},
            {"type": "text", "text": plan_text(plan)},
            {"type": "text", "text": "\n\n".join(ask)},
        ],
    }


def feedback_turn(text: str) -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "text", "text": text}]}


def assistant_turn(text: str) -> dict[str, Any]:
    # The API rejects empty assistant content; a reply that was empty still happened.
    return {"role": "assistant", "content": [{"type": "text", "text": text or "(empty reply)"}]}


def with_rolling_cache(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A copy of ``messages`` with a cache breakpoint on the newest user turn only.

    The first user turn keeps its own (task) breakpoint; at most 4 are allowed per
    request and the system prompt holds one.
    """
    out: list[dict[str, Any]] = []
    for index, message in enumerate(messages):
        content = [dict(block) for block in message["content"]]
        is_last_user = index == len(messages) - 1 and message["role"] == "user" and index > 0
        for block in content:
            if index > 0:
                block.pop("cache_control", None)
        if is_last_user:
            content[-1]["cache_control"] = CACHE
        out.append({"role": message["role"], "content": content})
    return out
