"""A constructor that needs values (Swin's drop-path rates: ``x.item()`` over a ``linspace``) cannot run on
the meta device; the model is built on the CPU instead and traced as any other."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")
trace_handler = pytest.importorskip("stitch_lsp.worker.trace_handler")

SOURCE = '''
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, depth, dim):
        super().__init__()
        self.scales = [1.0 - x.item() for x in torch.linspace(0, 0.1, depth)]
        self.lin = nn.Linear(dim, dim)

    def forward(self, x):
        for s in self.scales:
            x = torch.relu(self.lin(x)) * s + x
        return x

def get_inputs():
    return [torch.randn(8, 16)]

def get_init_inputs():
    return [3, 16]
'''


def test_a_constructor_that_reads_values_is_built_on_the_cpu_and_traced():
    reply = trace_handler.trace_task(SOURCE)
    assert reply.ok, reply.message
    muls = [n for n in reply.graph.nodes if n.op == "aten.mul.Tensor"]
    assert [round(n.args[1], 4) for n in muls] == [1.0, 0.95, 0.9]
    assert {i.path for i in reply.graph.inputs if i.role == "param"} == {"lin.weight", "lin.bias"}


def test_other_constructor_errors_still_say_what_failed():
    reply = trace_handler.trace_task(SOURCE.replace("self.lin = nn.Linear(dim, dim)", "raise ValueError('no')"))
    assert not reply.ok and "building the task's model failed: ValueError: no" in reply.message


def test_a_symbolic_trace_past_its_deadline_falls_back_to_fixed_sizes(monkeypatch):
    """Symbolic sizes can cost minutes of simplification (a Swin transformer's window partitions); past the
    deadline the fixed-size trace is taken and the task still traces."""
    import time

    from stitch_lsp.worker import trace_handler

    source = '''
import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, x):
        b, c, h, w = x.shape
        x = x.view(b, c, h // 2, 2, w // 2, 2).permute(0, 2, 4, 1, 3, 5).reshape(b, -1, c * 4)
        return torch.relu(x) * 2.0

def get_inputs():
    return [torch.randn(2, 3, 8, 8)]

def get_init_inputs():
    return []
'''
    symbolic = trace_handler.trace_task(source)
    assert symbolic.ok and symbolic.graph.symbolic
    monkeypatch.setattr(trace_handler, "SYMBOLIC_TRACE_S", 0.001)
    start = time.monotonic()
    fixed = trace_handler.trace_task(source)
    assert fixed.ok, fixed.message
    assert not fixed.graph.symbolic
    assert [n.op for n in fixed.graph.nodes] == [n.op for n in symbolic.graph.nodes]
    assert time.monotonic() - start < 60
