"""The memory plan: its arithmetic (pure), and the sizes it is made from (a meta-device trace)."""

from __future__ import annotations

import re
import types

import pytest
import torch

from stitch_lsp.contract import memory_plan as mp
from stitch_lsp.contract.memory_plan import GiB, TaskSizes, plan_memory
from stitch_lsp.worker.footprint import task_sizes

# An H100 80GB as torch sees it: 79.2 GiB in all, about 78.6 free once the context is up.
H100_TOTAL = int(79.19 * GiB)
H100_FREE = int(78.6 * GiB)


def sizes(i_gib: float, o_gib: float, forward_outputs: float = 1.0, params_gib: float = 0.0) -> TaskSizes:
    i, o, p = int(i_gib * GiB), int(o_gib * GiB), int(params_gib * GiB)
    return TaskSizes(input_bytes=i, output_bytes=o, forward_peak_bytes=int(o * forward_outputs), param_bytes=p,
                     float_input_bytes=i, float_output_bytes=o, float_param_bytes=p)


def test_a_6gib_task_fits_with_every_phase_and_three_timing_sets():
    plan = plan_memory(sizes(6, 6, forward_outputs=2), total_bytes=H100_TOTAL, free_bytes=H100_FREE,
                       odd=sizes(6.01, 6.01, forward_outputs=2))
    assert plan.status == "planned", plan.message
    assert [p.name for p in plan.phases] == ["trials", "second_shape", "accuracy", "rejudge", "timing"]
    assert all(p.runs for p in plan.phases)
    assert plan.timing_input_sets == 3 and plan.compile_baseline
    # one input, the other side's output, the forward's two outputs, the comparison's slices
    assert mp.phase(plan, "trials").need_bytes == pytest.approx(24 * GiB, abs=GiB)
    assert plan.compare_chunk_elements == mp.CHUNK_ELEMENTS


@pytest.mark.parametrize("share_in", [0.05, 0.5, 0.95])
@pytest.mark.parametrize("temporaries", [0.0, 1.0])
def test_inputs_and_outputs_at_45_percent_of_the_gpu_verify(share_in, temporaries):
    # The reference's forward may hold temporaries beyond its outputs, up to the size of its inputs
    # (relu(x) * 2 with inputs as large as its output holds two outputs at once).
    both = 0.45 * H100_TOTAL / GiB
    i, o = both * share_in, both * (1 - share_in)
    task = sizes(i, o, forward_outputs=(o + temporaries * min(i, o)) / o)
    plan = plan_memory(task, total_bytes=H100_TOTAL, free_bytes=H100_FREE)
    assert plan.status == "planned", plan.message
    assert mp.runs(plan, "trials") and mp.runs(plan, "timing") and plan.timing_input_sets >= 1


def test_a_task_that_cannot_fit_is_too_large_with_the_figures():
    plan = plan_memory(sizes(40, 40), total_bytes=H100_TOTAL, free_bytes=H100_FREE)
    assert plan.status == "too_large"
    assert re.search(r"the checks need 12\d\.\d\d GiB", plan.message), plan.message
    assert "78.60 GiB of 79.19 GiB are free" in plan.message


def test_other_processes_memory_counts_against_the_plan():
    task = sizes(12, 12)
    assert plan_memory(task, total_bytes=H100_TOTAL, free_bytes=H100_FREE).status == "planned"
    assert plan_memory(task, total_bytes=H100_TOTAL, free_bytes=30 * GiB).status == "too_large"


def test_big_inputs_get_fewer_timing_sets_then_lose_the_compile_baseline():
    sets = []
    for i in (4, 26, 40):
        plan = plan_memory(sizes(i, 2), total_bytes=H100_TOTAL, free_bytes=H100_FREE)
        sets.append((plan.timing_input_sets, plan.compile_baseline))
    assert sets[0] == (3, True) and sets[-1][0] == 1
    assert [n for n, _ in sets] == sorted((n for n, _ in sets), reverse=True)
    tight = plan_memory(sizes(75, 0.25), total_bytes=H100_TOTAL, free_bytes=H100_FREE)
    assert tight.timing_input_sets == 1 and not tight.compile_baseline
    assert "no room for the torch.compile baseline" in mp.phase(tight, "timing").note


def test_float64_accuracy_and_second_shape_are_dropped_when_they_cannot_fit():
    plan = plan_memory(sizes(20, 20), total_bytes=H100_TOTAL, free_bytes=H100_FREE, odd=sizes(26, 26))
    assert plan.status == "planned"
    assert not mp.runs(plan, "accuracy") and "float64" in mp.phase(plan, "accuracy").note
    assert not mp.runs(plan, "second_shape")
    assert "no float64 accuracy run" in plan.message and "no second shape" in plan.message
    # A failed trial's float64 judgement holds both sides' outputs beside the float64 run.
    assert not mp.runs(plan, "rejudge") and "no float64 judgement of failed trials" in plan.message
    assert mp.phase(plan, "rejudge").need_bytes > mp.phase(plan, "accuracy").need_bytes


def test_a_user_cap_limits_the_plan_and_small_budgets_use_smaller_slices():
    capped = plan_memory(sizes(0.5, 0.5), total_bytes=H100_TOTAL, free_bytes=H100_FREE, limit_bytes=2 * GiB)
    assert capped.budget_bytes == 2 * GiB and capped.compare_chunk_elements < mp.CHUNK_ELEMENTS
    assert "capped at 2.00 GiB" in plan_memory(sizes(3, 3), total_bytes=H100_TOTAL, free_bytes=H100_FREE,
                                               limit_bytes=2 * GiB).message


def _module(source: str) -> types.ModuleType:
    module = types.ModuleType("reference")
    exec(compile(source, "reference.py", "exec"), module.__dict__)
    return module


TASK = """
import torch, torch.nn as nn
B, D = 4096, 393216
class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.scale = nn.Parameter(torch.ones(D))
    def forward(self, x):
        {body}
def get_inputs():
    return [torch.randn(B, D)]
def get_init_inputs():
    return []
"""


@pytest.mark.parametrize("body,peak_outputs", [
    ("return torch.softmax(x, dim=1)", 1),
    ("return torch.relu(x) * 2.0", 2),  # relu's result is alive while the product is made
    ("y = torch.relu(x)\n        y = y * self.scale\n        return y + 1", 2),
])
def test_sizes_come_from_a_meta_trace_of_the_reference(body, peak_outputs):
    found, why = task_sizes(_module(TASK.format(body=body)))
    assert found is not None and found.traced and not why
    six = 4096 * 393216 * 4
    assert found.input_bytes == six and found.output_bytes == six and found.output_tensor_bytes == [six]
    assert found.forward_peak_bytes == peak_outputs * six
    assert found.param_bytes == 393216 * 4
    assert not torch.cuda.is_initialized()  # nothing was allocated anywhere


def test_a_forward_that_cannot_run_on_meta_gets_guessed_sizes():
    found, why = task_sizes(_module(TASK.format(body="return x[x > 0].sum().item() * x")))
    assert found is not None and not found.traced and "meta" in why
    assert found.output_bytes == found.input_bytes


LSTM_TASK = """
import torch, torch.nn as nn
class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(64, 128, num_layers=3, batch_first=True, bidirectional=True)
    def forward(self, x, h0, c0):
        out, _ = self.lstm(x, (h0, c0))
        return out[:, -1, :]
def get_inputs():
    return [torch.randn(8, 4096, 64), torch.randn(6, 8, 128), torch.randn(6, 8, 128)]
def get_init_inputs():
    return []
"""


def test_a_recurrent_module_is_sized_as_its_one_library_call_not_step_by_step():
    found, why = task_sizes(_module(LSTM_TASK))
    assert found is not None and found.traced and not why
    assert found.output_tensor_bytes == [8 * 256 * 4]  # the last step of both directions
    # The last layer's output for the whole sequence (8 x 4096 x 256 floats) and the states: the one call's
    # outputs. Step by step (the module as written, on meta) holds every step's gates too: four times that.
    whole = 8 * 4096 * 256 * 4
    assert whole <= found.forward_peak_bytes < 1.1 * whole
