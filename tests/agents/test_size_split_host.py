"""A pointwise group whose outputs differ in size (an RNN step unrolled: the new hidden state, and the next
step's ``cat`` of the input and that state) is one kernel: the chunks inside the smaller output's range write it
too. Run here on the host against eager, including sizes that are not whole vectors."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")

from tests.agents.test_template_pointwise_host import _check, pytestmark  # noqa: E402,F401

STEP = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x, h):
        hidden = torch.tanh(x[:, :8] * 0.5 + h)
        return hidden, torch.cat((x, hidden), dim=1)


def get_inputs():
    return [torch.randn(5, 16), torch.randn(5, 8)]


def get_init_inputs():
    return []
"""


@pytest.mark.parametrize("width", [8, 7], ids=["whole-vectors", "odd-sizes"])
def test_outputs_of_two_sizes_are_one_kernel_and_match_eager(width, tmp_path):
    source = STEP.replace("x[:, :8]", f"x[:, :{width}]").replace("torch.randn(5, 8)", f"torch.randn(5, {width})")
    program = _check(source, tmp_path, cases=("random", "nan", "inf"))
    (kernel,) = program.kernels
    assert not program.blocking_ops and not any("one kernel per output size" in n for n in program.notes)
    assert len(kernel.outputs) == 2 and f"if (c0 < {5 * width})" in kernel.source
    assert ("4-wide" in kernel.note) == (width == 8), kernel.note  # 35 elements: chunks of one


def test_an_unrolled_recurrent_cell_has_one_kernel_a_step_and_matches_eager(tmp_path):
    from tests.agents.test_recurrent_library_calls_gpu import CELL

    program = _check(CELL, tmp_path, cases=("random", "nan"))
    steps = 6
    # A step's kernel writes its new hidden state (8 x 32) and the next step's cat (8 x 80); the first step's cat,
    # the last step's hidden state and the final stack are one kernel each.
    assert len(program.kernels) == steps + 2, program.notes
    assert sum(len(k.outputs) == 2 for k in program.kernels) == steps - 1
