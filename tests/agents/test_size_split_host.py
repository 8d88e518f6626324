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
