"""``torch.clamp`` with tensor bounds (a Swin V2 attention's ``clamp(logit_scale, max=log(100))``, bounds read
from another input) runs in the template Coder's kernels as its lower bound then its upper one, NaN in the
value or in a bound giving NaN as eager's clamp does. Built for the host and run against eager on the CPU."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from stitch_lsp.coders.template import lower  # noqa: E402
from tests.agents import test_template_pointwise_host as host  # noqa: E402

pytestmark = [pytest.mark.timeout(600),
              pytest.mark.skipif(host.GXX is None or host.INCLUDE is None, reason="needs g++ and the CUDA headers")]

MODELS = {
    # Both bounds tensors that broadcast, the lower above the upper in places (eager then gives the upper).
    "both-bounds": """
import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, x, lo, hi):
        return torch.clamp(x * 2.0, min=lo, max=hi) + 1.0

def get_inputs():
    return [torch.randn(4, 6), torch.randn(1, 6) - 0.5, torch.randn(4, 1) + 0.5]

def get_init_inputs():
    return []
""",
    # Swin V2's: an upper bound only, a 0-d tensor made in forward, on a parameter, then exp.
    "upper-bound-of-a-parameter": """
import math
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.logit_scale = nn.Parameter(torch.log(10 * torch.rand(3, 1, 1)) + 2.0)

    def forward(self, attn):
        scale = torch.clamp(self.logit_scale, max=torch.log(torch.tensor(1.0 / 0.01))).exp()
        return attn * scale

def get_inputs():
    return [torch.randn(2, 3, 4, 4)]

def get_init_inputs():
    return []
""",
}


@pytest.mark.parametrize("name", sorted(MODELS))
def test_clamp_with_tensor_bounds_runs_in_a_kernel_and_matches_eager(name, tmp_path):
    from stitch_lsp.worker.trace_handler import trace_task

    reply = trace_task(MODELS[name])
    assert reply.ok, reply.message
    program = lower(reply.graph)
    assert program.covered, program.blocking_ops
    index = reply.graph.index()
    in_kernels = {index[n].op for step in program.steps if step.kernel is not None for n in step.nodes}
    assert {"aten.clamp_min.Tensor", "aten.clamp_max.Tensor"} & in_kernels, in_kernels
    host.check_against_eager(MODELS[name], program, ("random", "nan"), tmp_path)
