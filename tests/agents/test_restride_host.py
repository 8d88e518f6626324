"""An ``as_strided`` that only restates a layout (the adaptive average pool's decomposition restrides its
``[n, c, 1, 1]`` result) is an alias in the plan, so a Swin head (a norm, tokens averaged, a classifier) runs in
kernels; an ``as_strided`` that moves elements is never taken for one."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")

from stitch_lsp.coders.template import lower  # noqa: E402
from stitch_lsp.op_graph import GraphInput, OpGraph, OpNode  # noqa: E402
from stitch_lsp.plan.fusion import simplify  # noqa: E402
from tests.agents import test_template_pointwise_host as host  # noqa: E402
from tests.agents import test_template_rows_host as rows  # noqa: E402

HEAD = """
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = nn.LayerNorm(32)
        self.pool = nn.AdaptiveAvgPool1d(1)
        self.fc = nn.Linear(32, 10)

    def forward(self, x):
        x = self.norm(x)
        x = self.pool(x.transpose(1, 2))
        return self.fc(torch.flatten(x, 1))

def get_inputs():
    return [torch.randn(3, 49, 32)]

def get_init_inputs():
    return []
"""


@pytest.mark.timeout(600)
@pytest.mark.skipif(host.GXX is None or host.INCLUDE is None, reason="needs g++ and the CUDA headers")
def test_a_swin_head_runs_in_kernels_and_matches_eager(tmp_path, monkeypatch):
    from stitch_lsp.worker.trace_handler import trace_task

    reply = trace_task(HEAD)
    assert reply.ok, reply.message
    assert any(n.op == "aten.as_strided_.default" for n in reply.graph.nodes)  # what the pool's decomposition left
    program = lower(reply.graph)
    assert program.covered, program.blocking_ops
    monkeypatch.setattr(host, "_driver", rows._driver)
    host.check_against_eager(HEAD, program, ("random", "nan"), tmp_path)


def _graph(stride: list[int]) -> OpGraph:
    def node(name, op, args, shape):
        return OpNode(name, op, json.dumps(args), "{}", shape, "float32")

    return OpGraph(inputs=[GraphInput("x", "input", "", 0, (2, 3, 4), "float32")], outputs=["r"], nodes=[
        node("m", "aten.mul.Tensor", [{"$": "x"}, 2.0], (2, 3, 4)),
        node("r", "aten.as_strided.default", [{"$": "m"}, [2, 3, 4], stride], (2, 3, 4)),
    ])


def test_only_an_as_strided_that_keeps_every_element_in_place_becomes_an_alias():
    assert simplify(_graph([12, 4, 1])).index()["r"].op == "aten.alias.default"
    assert simplify(_graph([1, 2, 6])).index()["r"].op == "aten.as_strided.default"  # a transpose: elements move
