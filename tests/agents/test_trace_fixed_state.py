"""Deep nets are traced with their weights' sizes fixed and forward's input sizes as symbols: the symbolic
trace stays a few seconds where every weight's sizes as symbols cost minutes, and the program re-lowers for
another batch; a weight of another size is refused by name."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")
trace_handler = pytest.importorskip("stitch_lsp.worker.trace_handler")

from stitch_lsp.op_graph import ShapeMismatch, specialise  # noqa: E402

TASK = """
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, width, layers):
        super().__init__()
        self.body = nn.Sequential(*[nn.Sequential(nn.Linear(width, width), nn.ReLU()) for _ in range(layers)])

    def forward(self, x):
        return self.body(x)

def get_inputs():
    return [torch.randn(16, 32)]

def get_init_inputs():
    return [32, LAYERS]
"""


def _trace(layers: int):
    reply = trace_handler.trace_task(TASK.replace("LAYERS", str(layers)))
    assert reply.ok, reply.message
    return reply.graph


def _exprs(graph, role):
    return [list(gi.shape_expr or [str(d) for d in gi.shape]) for gi in graph.inputs if gi.role == role]


def test_a_deep_net_traces_its_weights_at_their_sizes_and_its_input_with_symbols():
    layers = trace_handler.FIXED_STATE_OVER // 2 + 1  # a weight and a bias each: just past the limit
    graph = _trace(layers)
    assert graph.symbolic
    assert all(d.isdigit() for shape in _exprs(graph, "param") for d in shape)
    (x,) = _exprs(graph, "input")
    assert x[0].isidentifier() and x[1] == "32"  # the batch is free; the features are the weight's
    shapes = [tuple(gi.shape) for gi in graph.inputs]
    assert specialise(graph, shapes[:-1] + [(23, 32)]).inputs[-1].shape == (23, 32)
    with pytest.raises(ShapeMismatch, match="where the traced program needs 32"):
        specialise(graph, [(48, 48), *shapes[1:-1], (16, 32)])


def test_a_small_model_keeps_symbolic_weight_sizes():
    graph = _trace(2)
    assert graph.symbolic
    assert any(d.isidentifier() for shape in _exprs(graph, "param") for d in shape)
