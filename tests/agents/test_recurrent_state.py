"""A recurrent state kept on the module is not covered, and the reason names the statement, never PyTorch's
internal assertion text."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")
trace_handler = pytest.importorskip("stitch_lsp.worker.trace_handler")

from stitch_lsp.worker.model_facts.module_state import plain_trace_error  # noqa: E402

RNN = '''
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, input_size, hidden_size, output_size):
        super().__init__()
        self.hidden = torch.randn((4, hidden_size))
        self.i2h = nn.Linear(input_size + hidden_size, hidden_size)
        self.h2o = nn.Linear(hidden_size, output_size)
        self.tanh = nn.Tanh()

    def forward(self, x):
        self.hidden = self.hidden.to(x.device)
        combined = torch.cat((x, self.hidden), dim=1)
        self.hidden = self.tanh(self.i2h(combined))
        return self.h2o(self.hidden)

def get_inputs():
    return [torch.randn(4, 12)]

def get_init_inputs():
    return [12, 8, 6]
'''


def test_a_hidden_state_replaced_in_forward_is_named_with_its_line():
    reply = trace_handler.trace_task(RNN)
    assert not reply.ok
    assert reply.message.startswith("Model.forward, line 16: `self.hidden = self.tanh(self.i2h(combined))`")
    assert "recurrent state" in reply.message and "neither a parameter nor a buffer" in reply.message
    assert "INTERNAL ASSERT" not in reply.message and "FakeTensor" not in reply.message


def test_a_plain_tensor_attribute_read_in_forward_is_named_when_tracing_fails():
    source = RNN.replace("        self.hidden = self.hidden.to(x.device)\n", "").replace(
        "        self.hidden = self.tanh(self.i2h(combined))\n        return self.h2o(self.hidden)",
        "        return self.h2o(self.tanh(self.i2h(combined)))")
    reply = trace_handler.trace_task(source)
    assert not reply.ok
    assert "line 14: `combined = torch.cat((x, self.hidden), dim=1)` reads `self.hidden`" in reply.message
    assert "register_buffer('hidden'" in reply.message
    assert "FakeTensor" not in reply.message


def test_the_state_as_an_input_traces():
    source = RNN.replace("    def forward(self, x):\n        self.hidden = self.hidden.to(x.device)\n",
                         "    def forward(self, x, h):\n        self.unused = 1\n").replace(
        "(x, self.hidden)", "(x, h)").replace("        self.hidden = self.tanh(self.i2h(combined))\n        return "
                                               "self.h2o(self.hidden)", "        return self.h2o(self.tanh(self.i2h(combined)))")
    source = source.replace("return [torch.randn(4, 12)]", "return [torch.randn(4, 12), torch.randn(4, 8)]")
    reply = trace_handler.trace_task(source)
    assert reply.ok, reply.message


def test_pytorch_internal_assertions_become_what_they_mean():
    exc = RuntimeError('false INTERNAL ASSERT FAILED at "RegisterFunctionalization_0.cpp":3981, please report a bug '
                       'to PyTorch. mutating a non-functional tensor with a functional tensor is not allowed')
    text = plain_trace_error(exc)
    assert "INTERNAL ASSERT" not in text and "report a bug" not in text
    assert "in-place change of a tensor that is not an input, parameter or buffer" in text
