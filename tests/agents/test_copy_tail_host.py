"""A copy at the end of a graph (a concatenation of a convolution's output with the block's input, a flip or a
repeat of a GEMM's output) is written as a kernel, not left to PyTorch: left there, the candidate's forward calls
``torch.cat`` and the Verifier's anti-hacking guard rightly calls that PyTorch work. Each program is built for the
host and run against eager PyTorch on the CPU, as tests/agents/test_template_patterns_host.py runs its patterns.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from stitch_lsp.coders.template import lower  # noqa: E402
from stitch_lsp.plan import op_table  # noqa: E402
from tests.agents import test_template_pointwise_host as host  # noqa: E402
from tests.agents import test_template_rows_host as rows  # noqa: E402

pytestmark = [pytest.mark.timeout(600),
              pytest.mark.skipif(host.GXX is None or host.INCLUDE is None, reason="needs g++ and the CUDA headers")]

HEAD = """
import torch
import torch.nn as nn
import torch.nn.functional as F
"""

MODELS = {
    # A dense block's last step: the input and the features a convolution made, side by side along the channels.
    "conv-then-cat": """
class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(4, 3, 3, padding=1, bias=False)

    def forward(self, x):
        y = self.conv(x)
        return torch.cat([x, y, y], 1)

def get_inputs():
    return [torch.randn(2, 4, 5, 6)]

def get_init_inputs():
    return []
""",
    "linear-then-flip": """
class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(12, 10)

    def forward(self, x):
        return torch.flip(self.lin(x), [0, 1])

def get_inputs():
    return [torch.randn(7, 12)]

def get_init_inputs():
    return []
""",
    "linear-then-repeat": """
class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 6)

    def forward(self, x):
        return self.lin(x).repeat(2, 3)

def get_inputs():
    return [torch.randn(5, 8)]

def get_init_inputs():
    return []
""",
}


@pytest.mark.parametrize("name", sorted(MODELS))
def test_a_trailing_copy_is_a_kernel_and_matches_eager(name, tmp_path, monkeypatch):
    from stitch_lsp.worker.trace_handler import trace_task

    source = HEAD + MODELS[name]
    reply = trace_task(source)
    assert reply.ok, reply.message
    program = lower(reply.graph)
    assert program.covered, program.blocking_ops
    index = reply.graph.index()
    left_to_torch = [index[n].op for step in program.steps if step.kernel is None for n in step.nodes]
    assert not set(left_to_torch) & op_table.COPYING_VIEW_OPS, left_to_torch
    assert program.kernels
    monkeypatch.setattr(host, "_driver", rows._driver)
    host.check_against_eager(source, program, ("random", "nan"), tmp_path)
