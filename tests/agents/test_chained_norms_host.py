"""A LayerNorm of a LayerNorm's output in one row kernel: the second norm's one-pass variance takes its shift
from the row's first values, which the first norm computes from its own per-row mean. Such a chain, on a
token-major tensor or on a transposed image (a Swin / ViT patch embedding's norm, then a block's), used to stay
PyTorch ("a per-row value read at another element's index"); a window partition after it runs as a separate
pointwise kernel. Built for the host and run against eager PyTorch on the CPU."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from stitch_lsp.coders.template import lower  # noqa: E402
from tests.agents import test_template_pointwise_host as host  # noqa: E402
from tests.agents import test_template_rows_host as rows  # noqa: E402

pytestmark = [pytest.mark.timeout(600),
              pytest.mark.skipif(host.GXX is None or host.INCLUDE is None, reason="needs g++ and the CUDA headers")]

MODEL = """
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.n1 = nn.LayerNorm(WIDTH)
        self.n2 = nn.LayerNorm(WIDTH)

    def forward(self, x):
        y = self.n1(TOKENS)
        z = self.n2(y)
        return y, OUT

def get_inputs():
    return [torch.randn(INPUT)]

def get_init_inputs():
    return []
"""
CASES = {
    "tokens": dict(TOKENS="x", OUT="z", INPUT="2, 36, 24", WIDTH="24"),
    # Rows long enough that each thread loops over its share of the row.
    "long-rows": dict(TOKENS="x", OUT="z", INPUT="3, 6144", WIDTH="6144"),
    "transposed-image": dict(TOKENS="x.flatten(2).transpose(1, 2)", OUT="z", INPUT="2, 24, 6, 6", WIDTH="24"),
    # A window partition of the second norm's output (Swin's): the windows read rows in another order.
    "then-windows": dict(TOKENS="x.flatten(2).transpose(1, 2)", INPUT="2, 24, 6, 6", WIDTH="24",
                         OUT="z.view(2, 2, 3, 2, 3, 24).permute(0, 1, 3, 2, 4, 5).reshape(-1, 9, 24)"),
}


def _source(case: dict) -> str:
    text = MODEL
    for key, value in case.items():
        text = text.replace(key, value)
    return text


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_layer_norm_of_a_layer_norm_runs_in_kernels_and_matches_eager(name, tmp_path, monkeypatch):
    from stitch_lsp.worker.trace_handler import trace_task

    source = _source(CASES[name])
    reply = trace_task(source)
    assert reply.ok, reply.message
    program = lower(reply.graph)
    assert program.covered, program.blocking_ops
    assert not any("stays PyTorch" in note for note in program.notes), program.notes
    monkeypatch.setattr(host, "_driver", rows._driver)
    host.check_against_eager(source, program, ("random", "nan"), tmp_path)
