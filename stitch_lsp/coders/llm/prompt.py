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

from stitch_lsp.coders.llm.reply import KERNEL_FILE, code_blocks
from stitch_lsp.pipeline import Plan, Task, TensorSpec
from stitch_lsp.skills import coder_rules, cuda_guide

CACHE = {"type": "ephemeral"}

# The Coder's rules and reply format, with the example binding that shows the loader's API
# (stitch_lsp.runtime.loader: NVRTC, compiled once per process, cached by content hash).
SYSTEM_RULES = coder_rules()


def loader_usage() -> str:
    """The example binding in the rules (the first ```python block)."""
    blocks, _ = code_blocks(SYSTEM_RULES)
    return next(b.text for b in blocks if b.tag == "python")


def system_blocks() -> list[dict[str, Any]]:
    """The stable system prompt: rules then the skills guide, cached as one prefix."""
    return [
        {"type": "text", "text": SYSTEM_RULES},
        {"type": "text", "text": "# CUDA skills guide\n\n" + cuda_guide(), "cache_control": CACHE},
    ]


def task_text(task: Task) -> str:
    lines = [f"# Task: {task.name}", ""]
    if task.inputs:
        shapes = ", ".join(_input_text(spec) for spec in task.inputs)
        lines += [f"Inputs (from {task.shape_source or 'the task'}): {shapes}", ""]
    lines += ["Reference (PyTorch):", "```python", task.source.rstrip(), "```"]
    return "\n".join(lines)


def _input_text(spec: TensorSpec) -> str:
    text = f"{'x'.join(map(str, spec.shape)) or 'scalar'} {spec.dtype}"
    if spec.strides is not None:  # the user's program passes a transposed or sliced view: kernels must not assume
        text += f" (not contiguous: strides {', '.join(map(str, spec.strides))})"
    return text


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
