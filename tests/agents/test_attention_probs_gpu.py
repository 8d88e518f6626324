"""On a GPU: attention's probabilities alone (nanoGPT's manual attention selected up to the softmax) run as one
kernel of our own and pass the Verifier, in fp32 and bf16.

    python -m pytest -q -m gpu tests/agents/test_attention_probs_gpu.py

The module is our own, at nanoGPT's editor sizes (2 sequences of 256, 4 heads of 64); q and k are heads split
from one projection, so they arrive as transposed views, as the recorded selection has them.
"""

from __future__ import annotations

import pytest

from stitch_lsp.fuse.service import fuse_task
from stitch_lsp.pipeline import Task
from stitch_lsp.settings import Settings
from stitch_lsp.task.precision import cast_source

SOURCE = '''
import math
import torch
import torch.nn as nn
import torch.nn.functional as F

class Model(nn.Module):
    def __init__(self, max_len):
        super().__init__()
        self.register_buffer("bias", torch.tril(torch.ones(max_len, max_len)).view(1, 1, max_len, max_len))
        self.attn_dropout = nn.Dropout(0.1)

    def forward(self, q, k):
        T = q.size(-2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float('-inf'))
        att = F.softmax(att, dim=-1)
        return self.attn_dropout(att)

def get_inputs():
    qkv = torch.randn(2, 256, 3, 4, 64)
    return [qkv[:, :, 0].transpose(1, 2), qkv[:, :, 1].transpose(1, 2)]

def get_init_inputs():
    return [256]
'''


@pytest.mark.gpu
@pytest.mark.timeout(900)
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_attention_probabilities_run_as_one_kernel_and_pass_the_verifier(precision, verifier, tmp_path):
    task = Task(name=f"probs_{precision}", source=cast_source(SOURCE, precision))
    outcome = fuse_task(task, Settings(), verifier=verifier, workdir=tmp_path)
    verdict = outcome.verdict
    assert verdict is not None and verdict.status.value == "correct", (outcome.message, verdict and verdict.summary)
    assert not verdict.hack_flags
    kernels = " ".join(outcome.candidate.cuda_sources)
    # The kernel of our own, or (when it ran behind torch.compile) the scores GEMM and softmax with the reason.
    assert "stitch_attention_probs_" in kernels or "softmax kernel" in outcome.attention_fallback, outcome.message
    print(f"{precision}: {outcome.message} | {outcome.attention_fallback}")
