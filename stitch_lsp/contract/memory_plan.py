"""The Verifier's memory plan: what each phase of a verification needs, fitted into the GPU.

Pure arithmetic on byte counts (no torch): the worker traces the reference on the
``meta`` device for the sizes (``stitch_lsp.worker.footprint``), asks the GPU what is
free, and calls ``plan_memory`` before anything runs on the device.

What a phase holds at its peak, in the order the Verifier runs them:

- trials: both models, the output of whichever of reference / candidate ran first,
  one input set (drawn afresh for each side from the same seed, never cloned), the
  forward of the other side, and the comparison's slices;
- second shape: the same, with new models and the odd shape's sizes, while the first
  models are still alive;
- accuracy (float outputs, first seed): a float64 copy of the reference's weights, then
  either the float64 forward on float64 inputs, or its outputs held while eager and
  the candidate run on the float32 inputs;
- rejudge (inside the trials, only for a trial that failed against eager): both sides' outputs
  held while a float64 copy of the reference runs on float64 inputs, then beside its outputs;
- timing: both models, the input sets it rotates among, one forward at a time, the
  L2 flush buffer, and room for ``torch.compile``'s own buffers.

Outputs are compared in slices of ``compare_chunk_elements``, so no phase holds a
full-size float64 (or extra float32) copy of an output.
"""

from __future__ import annotations

from attrs import define, field

from stitch_lsp.verdict import MemoryPhase, MemoryPlan

GiB = 1 << 30
MiB = 1 << 20

L2_FLUSH_BYTES = 256 * MiB  # written before every timed call (> 2x the L2 of any current GPU)
COMPILE_ROOM_BYTES = 1 * GiB  # torch.compile's workspace beyond its forward's own peak
RESERVE_MIN_BYTES = 1 * GiB  # cuBLAS / cuDNN workspaces, allocator rounding and fragmentation
RESERVE_FRACTION = 0.03
CHUNK_ELEMENTS = 1 << 23  # 8M elements per comparison slice
CHUNK_BYTES_PER_ELEMENT = 80  # float64 copies of both sides, their difference, masks, bounds
MAX_TIMING_SETS = 3


@define
class TaskSizes:
    """Byte counts of one task at one shape, from the meta trace."""

    input_bytes: int  # one input set
    output_bytes: int
    forward_peak_bytes: int  # most live at once in the reference's forward (outputs included)
    param_bytes: int = 0  # parameters and buffers
    float_input_bytes: int = 0  # of input_bytes, floating point (doubled in the float64 run)
    float_output_bytes: int = 0
    float_param_bytes: int = 0
    traced: bool = True  # False: outputs and the forward's peak are guesses from the inputs
    output_tensor_bytes: list[int] = field(factory=list)  # each output's bytes (blocks to poison ahead)
    input_tensor_bytes: list[int] = field(factory=list)

    @property
    def forward_bytes(self) -> int:
        return max(self.forward_peak_bytes, self.output_bytes)


def gib(n: float) -> str:
    return f"{n / GiB:.2f}"


def reserve_bytes(total: int) -> int:
    return max(RESERVE_MIN_BYTES, int(total * RESERVE_FRACTION))


def chunk_elements(budget: int) -> int:
    """Comparison slices: 8M elements, fewer when the room left is small (never under 64K)."""
    n = CHUNK_ELEMENTS
    while n > (1 << 16) and n * CHUNK_BYTES_PER_ELEMENT > budget // 16:
        n //= 2
    return n


def trials_need(s: TaskSizes, chunk: int) -> int:
    return 2 * s.param_bytes + s.input_bytes + s.output_bytes + s.forward_bytes + chunk * CHUNK_BYTES_PER_ELEMENT


def second_shape_need(first: TaskSizes, odd: TaskSizes, chunk: int) -> int:
    return 2 * first.param_bytes + trials_need(odd, chunk)


def accuracy_need(s: TaskSizes, chunk: int) -> int:
    """Float64 weights, then max(the float64 forward, its outputs held while a float32 side runs)."""
    grow = 2  # float64 over float32; bf16 / fp16 outputs grow more but are smaller to begin with
    in64 = s.input_bytes + (grow - 1) * s.float_input_bytes
    out64 = s.output_bytes + (grow - 1) * s.float_output_bytes
    fwd64 = grow * s.forward_bytes
    params64 = grow * s.float_param_bytes
    run64 = in64 + fwd64
    hold = out64 + s.input_bytes + s.forward_bytes
    return 2 * s.param_bytes + params64 + max(run64, hold) + chunk * CHUNK_BYTES_PER_ELEMENT


def rejudge_need(s: TaskSizes, chunk: int) -> int:
    """Both models and both sides' outputs, with the float64 weights, inputs and forward beside them (the
    float64 outputs are part of that forward); compared in half-size slices (three sides, not two)."""
    grow = 2
    in64 = s.input_bytes + (grow - 1) * s.float_input_bytes
    return (2 * s.param_bytes + 2 * s.output_bytes + grow * s.float_param_bytes + in64 + grow * s.forward_bytes
            + chunk * CHUNK_BYTES_PER_ELEMENT)


def timing_need(s: TaskSizes, sets: int, compile_baseline: bool) -> int:
    room = COMPILE_ROOM_BYTES if compile_baseline else 0
    return 2 * s.param_bytes + sets * s.input_bytes + s.forward_bytes + L2_FLUSH_BYTES + room


def plan_memory(sizes: TaskSizes, *, total_bytes: int, free_bytes: int, odd: TaskSizes | None = None,
                timing: bool = True, compile_baseline: bool = True, accuracy: bool = True,
                limit_bytes: int | None = None, reserve: int | None = None) -> MemoryPlan:
    """Fit the phases into what is free.

    ``limit_bytes``: the user's cap on what the Verifier may use; ``reserve``: what to keep
    free for workspaces and fragmentation (default: 3 % of the GPU, at least 1 GiB).
    """
    reserve = reserve_bytes(total_bytes) if reserve is None else reserve
    budget = free_bytes - reserve
    if limit_bytes is not None:
        budget = min(budget, limit_bytes)
    budget = max(budget, 0)
    chunk = chunk_elements(budget)
    plan = MemoryPlan(status="planned", traced=sizes.traced, gpu_total_bytes=total_bytes, free_bytes=free_bytes,
                      budget_bytes=budget, input_bytes=sizes.input_bytes, output_bytes=sizes.output_bytes,
                      forward_peak_bytes=sizes.forward_bytes, param_bytes=sizes.param_bytes,
                      compare_chunk_elements=chunk)
    trials = trials_need(sizes, chunk)
    plan.phases.append(MemoryPhase("trials", trials))
    if trials > budget:
        plan.status = "too_large"
        plan.phases[0].runs = False
        cap = f" (capped at {gib(limit_bytes)} GiB)" if limit_bytes is not None else ""
        plan.message = (f"too large for this GPU: the checks need {gib(trials + reserve)} GiB "
                        f"(one input set {gib(sizes.input_bytes)} GiB, outputs {gib(sizes.output_bytes)} GiB, "
                        f"the reference's forward up to {gib(sizes.forward_bytes)} GiB, both models "
                        f"{gib(2 * sizes.param_bytes)} GiB, a {gib(reserve)} GiB reserve); "
                        f"{gib(free_bytes)} GiB of {gib(total_bytes)} GiB are free{cap}")
        return plan
    notes = []

    def optional(name: str, need: int, what: str, skipped: str) -> None:
        fits = need <= budget
        plan.phases.append(MemoryPhase(name, need, runs=fits, note="" if fits else
                                       f"{what} needs {gib(need)} GiB, {gib(budget)} GiB to plan with"))
        if not fits:
            notes.append(skipped)

    if odd is not None:
        optional("second_shape", second_shape_need(sizes, odd, chunk), "the second shape", "no second shape")
    if accuracy:
        optional("accuracy", accuracy_need(sizes, chunk), "the float64 run", "no float64 accuracy run")
        optional("rejudge", rejudge_need(sizes, chunk), "judging a failed trial against float64",
                 "no float64 judgement of failed trials")
    if timing:
        plan.phases.append(_timing_phase(plan, sizes, budget, compile_baseline))
        if plan.phases[-1].note:
            notes.append(plan.phases[-1].note)
    plan.message = (f"fits: {gib(trials)} GiB for the trials, {gib(budget)} GiB to plan with"
                    + (f" ({'; '.join(notes)})" if notes else ""))
    return plan


def _timing_phase(plan: MemoryPlan, sizes: TaskSizes, budget: int, compile_baseline: bool) -> MemoryPhase:
    for compiled in ((True, False) if compile_baseline else (False,)):
        for sets in range(MAX_TIMING_SETS, 0, -1):
            need = timing_need(sizes, sets, compiled)
            if need <= budget:
                plan.timing_input_sets = sets
                notes = []
                if sets < MAX_TIMING_SETS:
                    notes.append(f"{sets} timing input set{'s' if sets > 1 else ''} of {gib(sizes.input_bytes)} GiB")
                if compile_baseline and not compiled:
                    plan.compile_baseline = False
                    notes.append("no room for the torch.compile baseline")
                return MemoryPhase("timing", need, note="; ".join(notes))
    need = timing_need(sizes, 1, False)
    return MemoryPhase("timing", need, runs=False, note=f"no room to time: needs {gib(need)} GiB")


def phase(plan: MemoryPlan, name: str) -> MemoryPhase | None:
    return next((p for p in plan.phases if p.name == name), None)


def runs(plan: MemoryPlan, name: str) -> bool:
    """Whether the plan lets phase ``name`` run (phases it did not plan for run: CPU test mode)."""
    found = phase(plan, name)
    return found is None or found.runs
