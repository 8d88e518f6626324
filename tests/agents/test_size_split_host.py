"""A pointwise group whose outputs differ in size (an RNN step unrolled: the new hidden state, and the next
step's ``cat`` of the input and that state) is one kernel per size, run here on the host against eager."""

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


def test_outputs_of_two_sizes_are_two_kernels_and_match_eager(tmp_path):
    program = _check(STEP, tmp_path, cases=("random", "nan", "inf"))
    assert len(program.kernels) == 2 and not program.blocking_ops
    assert any("one kernel per output size" in n for n in program.notes)
