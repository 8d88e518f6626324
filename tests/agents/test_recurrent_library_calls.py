"""nn.LSTM, nn.GRU and nn.RNN are traced as the one library call each is (cuDNN's recurrent kernels on a GPU),
not unrolled into their cell once per step: the graph stays a few nodes whatever the sequence length, and the
program the template Coder makes from it (the recurrent call, then what follows it) gives eager's outputs."""

from __future__ import annotations

import time

import pytest

torch = pytest.importorskip("torch")
trace_handler = pytest.importorskip("stitch_lsp.worker.trace_handler")

from stitch_lsp.coders.template import lower  # noqa: E402
from stitch_lsp.plan import library_calls  # noqa: E402
from stitch_lsp.plan.gemm_tiles import GemmOptions  # noqa: E402
from tests.agents import test_template_pointwise_host as host  # noqa: E402
from tests.agents import test_template_rows_host as rows  # noqa: E402

HEAD = """
import torch
import torch.nn as nn
"""

MODELS = {
    # Two bidirectional layers, batch first, the last step through a Linear; the cell state returned too.
    "lstm": ("aten.lstm.input", """
class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(6, 8, 2, batch_first=True, bidirectional=True)
        self.fc = nn.Linear(16, 3)

    def forward(self, x, h0, c0):
        out, state = self.lstm(x, (h0, c0))
        return self.fc(out[:, -1, :]), state[1]

def get_inputs():
    return [torch.randn(3, 5, 6), torch.randn(4, 3, 8), torch.randn(4, 3, 8)]

def get_init_inputs():
    return []
"""),
    # Projections: the hidden state (and the outputs) are proj_size wide, the cell state hidden_size.
    "lstm-proj": ("aten.lstm.input", """
class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(4, 10, 1, proj_size=3)

    def forward(self, x):
        out, (h, c) = self.lstm(x)
        return out, h, c

def get_inputs():
    return [torch.randn(7, 2, 4)]

def get_init_inputs():
    return []
"""),
    # Sequence first, three layers, the final hidden state only.
    "gru": ("aten.gru.input", """
class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.gru = nn.GRU(5, 7, 3)

    def forward(self, x, h0):
        output, h_n = self.gru(x, h0)
        return h_n

def get_inputs():
    return [torch.randn(9, 2, 5), torch.randn(3, 2, 7)]

def get_init_inputs():
    return []
"""),
    "rnn-tanh-unbatched": ("aten.rnn_tanh.input", """
class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn = nn.RNN(4, 6, 2, bidirectional=True)

    def forward(self, x):
        return self.rnn(x)[0] * 2.0

def get_inputs():
    return [torch.randn(5, 4)]

def get_init_inputs():
    return []
"""),
    "rnn-relu": ("aten.rnn_relu.input", """
class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn = nn.RNN(4, 6, nonlinearity="relu", batch_first=True, bias=False)

    def forward(self, x):
        out, h = self.rnn(x)
        return out, h

def get_inputs():
    return [torch.randn(2, 6, 4)]

def get_init_inputs():
    return []
"""),
}


def traced(source: str):
    reply = trace_handler.trace_task(source)
    assert reply.ok, reply.message
    return reply.graph


@pytest.mark.skipif(host.GXX is None or host.INCLUDE is None, reason="needs g++ and the CUDA headers")
@pytest.mark.parametrize("name", sorted(MODELS))
def test_a_recurrent_module_is_one_library_call_and_its_program_matches_eager(name, tmp_path, monkeypatch):
    op, body = MODELS[name]
    source = HEAD + body
    graph = traced(source)
    ops = [n.op for n in graph.nodes]
    assert ops.count(op) == 1, ops
    assert len(ops) < 15, ops  # not its cell once per step
    program = lower(graph, GemmOptions(mode="cublas"))
    assert program.covered, program.blocking_ops
    assert any(call.startswith(op) for call in program.library_calls), program.library_calls
    # The program on the host: its kernels (a zero initial state, the work after the call) built with g++,
    # the recurrent call through torch, as a candidate makes it on a GPU.
    monkeypatch.setattr(host, "_driver", rows._driver)
    host.check_against_eager(source, program, ("random", "nan"), tmp_path)


def test_a_long_sequence_traces_in_seconds_not_minutes():
    source = HEAD + """
class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.gru = nn.GRU(128, 256, 6, batch_first=True)

    def forward(self, x, h0):
        return self.gru(x, h0)[0]

def get_inputs():
    return [torch.rand(10, 512, 128), torch.rand(6, 10, 256)]

def get_init_inputs():
    return []
"""
    start = time.monotonic()
    graph = traced(source)
    # Unrolled, this was 67,000 nodes and two minutes; one call is a handful whatever the length.
    assert [n.op for n in graph.nodes].count("aten.gru.input") == 1
    assert len(graph.nodes) < 10
    assert time.monotonic() - start < 60


def test_recurrent_calls_are_named_as_cudnn_library_calls():
    for op in ("aten.lstm.input", "aten.gru.input", "aten.rnn_tanh.input", "aten.rnn_relu.input"):
        assert library_calls.library_kind(op) == "rnn"
        assert library_calls.runner(op) == "cuDNN's recurrent kernels"
