"""``Tensor.unfold`` (windows of a dimension as a new last one: a vision transformer's patches) is read through an
index map inside the kernels, as slices and flips are, instead of stopping the plan. Each program is built for
the host and run against eager PyTorch on the CPU, as tests/agents/test_template_patterns_host.py runs its
patterns."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from stitch_lsp.coders.template import lower  # noqa: E402
from tests.agents import test_template_pointwise_host as host  # noqa: E402
from tests.agents import test_template_rows_host as rows  # noqa: E402

pytestmark = [pytest.mark.timeout(600),
              pytest.mark.skipif(host.GXX is None or host.INCLUDE is None, reason="needs g++ and the CUDA headers")]

HEAD = """
import torch
import torch.nn as nn
"""

MODELS = {
    # Patches of an image, flattened to a sequence and projected, with a position embedding added after.
    "patches-then-linear": """
class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(3 * 4 * 4, 8)
        self.pos = nn.Parameter(torch.randn(1, 6, 8))

    def forward(self, img):
        p = 4
        x = img.unfold(2, p, p).unfold(3, p, p).reshape(img.shape[0], -1, p * p * img.shape[1])
        return self.proj(torch.relu(x)) + self.pos

def get_inputs():
    return [torch.randn(2, 3, 8, 12)]

def get_init_inputs():
    return []
""",
    # Overlapping windows (step below size) and a window that does not reach the end, on a middle dimension.
    "overlapping-windows": """
class Model(nn.Module):
    def forward(self, x):
        return torch.sigmoid(x.unfold(1, 3, 2)) * 2.0 - x.sum()

def get_inputs():
    return [torch.randn(2, 8, 5)]

def get_init_inputs():
    return []
""",
}


@pytest.mark.parametrize("name", sorted(MODELS))
def test_unfold_is_an_index_map_and_matches_eager(name, tmp_path, monkeypatch):
    from stitch_lsp.worker.trace_handler import trace_task

    source = HEAD + MODELS[name]
    reply = trace_task(source)
    assert reply.ok, reply.message
    assert any(n.op == "aten.unfold.default" for n in reply.graph.nodes)
    program = lower(reply.graph)
    assert program.covered, program.blocking_ops
    index = reply.graph.index()
    in_kernels = {n for step in program.steps if step.kernel is not None for n in step.nodes}
    assert any(index[n].op == "aten.unfold.default" for n in in_kernels), [s.nodes for s in program.steps]
    monkeypatch.setattr(host, "_driver", rows._driver)
    host.check_against_eager(source, program, ("random", "nan"), tmp_path)
