"""On a GPU: a recurrent module traced as one cuDNN call passes the Verifier, in fp32 and bf16.

    python -m pytest -q -m gpu tests/agents/test_recurrent_library_calls_gpu.py

Small modules of our own (an LSTM whose last step goes through a Linear, returning the final hidden state as
KernelBench's LSTM tasks do; a bidirectional GRU), fused by the template Coder as ``stitch bench`` fuses a task
and judged by the real Verifier, its anti-hacking guard included: the call runs cuDNN's recurrent kernels,
declared as the library call it is.
"""

from __future__ import annotations

import pytest

from stitch_lsp.fuse.service import fuse_task
from stitch_lsp.pipeline import Task
from stitch_lsp.settings import Settings
from stitch_lsp.task.precision import cast_source

LSTM = '''
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, input_size, hidden_size, num_layers, output_size):
        super().__init__()
        self.lstm = nn.LSTM(input_size, hidden_size, num_layers, batch_first=True)
        self.fc = nn.Linear(hidden_size, output_size)

    def forward(self, x, h0, c0):
        out, state = self.lstm(x, (h0, c0))
        out = self.fc(out[:, -1, :])
        return out, state[0]

def get_inputs():
    return [torch.rand(8, 128, 64), torch.rand(3, 8, 96), torch.rand(3, 8, 96)]

def get_init_inputs():
    return [64, 96, 3, 10]
'''

GRU = '''
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.gru = nn.GRU(32, 48, 2, bidirectional=True)

    def forward(self, x, h0):
        output, h_n = self.gru(x, h0)
        return torch.relu(output) * 2.0

def get_inputs():
    return [torch.rand(100, 6, 32), torch.rand(4, 6, 48)]

def get_init_inputs():
    return []
'''

CASES = {"lstm": (LSTM, "aten.lstm.input"), "gru": (GRU, "aten.gru.input")}


@pytest.mark.gpu
@pytest.mark.timeout(600)
@pytest.mark.parametrize("name,precision", [("lstm", "fp32"), ("gru", "fp32"), ("lstm", "bf16")])
def test_a_recurrent_module_runs_as_one_cudnn_call_and_passes_the_verifier(name, precision, verifier, tmp_path):
    source, op = CASES[name]
    task = Task(name=f"{name}_{precision}", source=cast_source(source, precision))
    outcome = fuse_task(task, Settings(), verifier=verifier, workdir=tmp_path, verify_library_only=True)
    assert outcome.candidate is not None, outcome.message
    assert any(call.startswith(op) for call in outcome.candidate.library_calls), outcome.candidate.library_calls
    verdict = outcome.verdict
    assert verdict is not None, outcome.message
    failed = [f"{t.name}: {t.detail}" for t in verdict.correctness.failed_trials]
    assert verdict.status.value == "correct", (verdict.summary, failed, [f.message for f in verdict.hack_flags])
    assert not verdict.hack_flags
    print(name, precision, verdict.summary)


# A recurrent cell written as a loop (unrolled by tracing): each step's new hidden state and the next step's
# concatenated input come from one kernel of two output sizes.
CELL = '''
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.i2h = nn.Linear(48 + 32, 32)
        self.h2o = nn.Linear(32, 16)

    def forward(self, x, h):
        outs = []
        for t in range(x.size(0)):
            h = torch.tanh(self.i2h(torch.cat((x[t], h), dim=1)))
            outs.append(self.h2o(h))
        return torch.stack(outs, dim=0)

def get_inputs():
    return [torch.rand(6, 8, 48), torch.rand(8, 32)]

def get_init_inputs():
    return []
'''


@pytest.mark.gpu
@pytest.mark.timeout(600)
def test_an_unrolled_recurrent_cell_passes_the_verifier_with_one_kernel_a_step(verifier, tmp_path):
    task = Task(name="rnn_cell", source=CELL)
    outcome = fuse_task(task, Settings(), verifier=verifier, workdir=tmp_path)
    assert outcome.candidate is not None, outcome.message
    assert not any("one kernel per output size" in n for n in outcome.candidate.notes), outcome.candidate.notes
    verdict = outcome.verdict
    assert verdict is not None, outcome.message
    failed = [f"{t.name}: {t.detail}" for t in verdict.correctness.failed_trials]
    assert verdict.status.value == "correct", (verdict.summary, failed, [f.message for f in verdict.hack_flags])
    print("rnn cell", verdict.summary)
