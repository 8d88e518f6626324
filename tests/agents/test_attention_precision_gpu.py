"""On a GPU: the attention plan and the template Coder's kernels in bf16 / fp16 pass the Verifier.

    python -m pytest -q -m gpu tests/agents/test_attention_precision_gpu.py

Each case is a small module of our own, fused by the template Coder as ``stitch bench`` fuses a task,
at the precision given (the model and the floating inputs cast, as KernelBench's harness does) and
judged by the real Verifier: trials, adversarial values, the second shape, the float64 judgement.
"""

from __future__ import annotations

import pytest

from stitch_lsp.fuse.fallbacks import MASKED_NAN
from stitch_lsp.fuse.service import fuse_task
from stitch_lsp.pipeline import Task
from stitch_lsp.task.precision import cast_source
from stitch_lsp.settings import Settings

HEADER = '''
import math
import torch
import torch.nn as nn
import torch.nn.functional as F
'''

ATTENTION = HEADER + '''
class Model(nn.Module):
    def __init__(self, n_embd, n_head, max_len):
        super().__init__()
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)
        self.attn_dropout = nn.Dropout(0.1)
        self.register_buffer("bias", torch.tril(torch.ones(max_len, max_len)).view(1, 1, max_len, max_len))
        self.n_head, self.n_embd = n_head, n_embd

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float('-inf'))
        att = self.attn_dropout(F.softmax(att, dim=-1))
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(y)

batch_size, max_len, seq_len, n_embd, n_head = 16, 512, 256, 384, 6

def get_inputs():
    return [torch.randn(batch_size, seq_len, n_embd)]

def get_init_inputs():
    return [n_embd, n_head, max_len]
'''

BLOCK = ATTENTION.replace("class Model(nn.Module):", "class Attention(nn.Module):") + '''

class Model(nn.Module):
    def __init__(self, n_embd, n_head, max_len):
        super().__init__()
        self.ln_1 = nn.LayerNorm(n_embd)
        self.attn = Attention(n_embd, n_head, max_len)
        self.ln_2 = nn.LayerNorm(n_embd)
        self.fc = nn.Linear(n_embd, 4 * n_embd)
        self.proj = nn.Linear(4 * n_embd, n_embd)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        h = self.fc(self.ln_2(x))
        h = 0.5 * h * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (h + 0.044715 * torch.pow(h, 3.0))))
        return x + self.proj(h)
'''

POINTWISE = HEADER + '''
class Model(nn.Module):
    def forward(self, x, y):
        return F.gelu(x) * torch.sigmoid(y) + 0.5 * torch.tanh(x - y)

def get_inputs():
    return [torch.randn(4096, 4097), torch.randn(4096, 4097)]

def get_init_inputs():
    return []
'''

ROWS = HEADER + '''
class Model(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.norm = nn.LayerNorm(d)

    def forward(self, x, r):
        return torch.softmax(self.norm(x + r) * 2.0, dim=-1)

d = 3000

def get_inputs():
    return [torch.randn(2048, d), torch.randn(2048, d)]

def get_init_inputs():
    return [d]
'''

# The attention core alone, as a selection of it is traced: q, k and v are inputs, so NaN or Inf planted in v
# at a future position reaches every earlier row in the written code (0 * NaN in att @ v), not in SDPA's.
SELECTION = HEADER + '''
class Model(nn.Module):
    def __init__(self, max_len):
        super().__init__()
        self.attn_dropout = nn.Dropout(0.1)
        self.register_buffer("bias", torch.tril(torch.ones(max_len, max_len)).view(1, 1, max_len, max_len))

    def forward(self, q, k, v):
        T = q.size(-2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float('-inf'))
        att = self.attn_dropout(F.softmax(att, dim=-1))
        return att @ v

def get_inputs():
    return [torch.randn(2, 4, 256, 64), torch.randn(2, 4, 256, 64), torch.randn(2, 4, 256, 64)]

def get_init_inputs():
    return [256]
'''

CASES = {"attention": ATTENTION, "transformer_block": BLOCK, "pointwise": POINTWISE, "rows": ROWS,
         "selection": SELECTION}


def fused(name: str, precision: str, verifier, tmp_path):
    task = Task(name=f"{name}_{precision}", source=cast_source(CASES[name], precision))
    outcome = fuse_task(task, Settings(), verifier=verifier, workdir=tmp_path, verify_library_only=True)
    assert outcome.candidate is not None, outcome.message
    verdict = outcome.verdict
    assert verdict is not None, outcome.message
    failed = [f"{t.name}: {t.detail}" for t in verdict.correctness.failed_trials]
    assert verdict.status.value == "correct", (verdict.summary, failed, [f.message for f in verdict.hack_flags])
    assert not verdict.hack_flags
    return outcome


@pytest.mark.gpu
@pytest.mark.timeout(900)
@pytest.mark.parametrize("precision", ["fp32", "bf16", "fp16"])
@pytest.mark.parametrize("name", ["attention", "transformer_block"])
def test_attention_runs_as_sdpa_and_passes_the_verifier(name, precision, verifier, tmp_path):
    outcome = fused(name, precision, verifier, tmp_path)
    calls = " ".join(outcome.candidate.library_calls)
    # One fused pass: the attention kernel of our own, or PyTorch's where ours was slower (the message says so).
    ours = any("attention kernel of our own" in note for note in outcome.candidate.notes)
    assert ours or ("scaled_dot_product_attention" in calls and outcome.attention_fallback), outcome.candidate.notes
    assert "is_causal=True" in outcome.plan_text
    assert outcome.verdict.correctness.dtype == {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}[precision]


@pytest.mark.gpu
@pytest.mark.timeout(900)
@pytest.mark.parametrize("precision", ["bf16", "fp16"])
@pytest.mark.parametrize("name", ["pointwise", "rows"])
def test_template_kernels_are_correct_in_half_precision(name, precision, verifier, tmp_path):
    outcome = fused(name, precision, verifier, tmp_path)
    assert outcome.candidate.cuda_sources, outcome.candidate.notes
    assert not outcome.candidate.blocking_ops
    accuracy = outcome.verdict.accuracy
    # Judged against float64 beside eager: fp32 accumulation keeps the kernels about as accurate as eager.
    assert accuracy.ratio is None or accuracy.ratio <= 4.0, accuracy.message


@pytest.mark.gpu
@pytest.mark.timeout(900)
def test_attention_whose_fused_call_misplaces_masked_nan_never_runs_pytorchs_and_passes(verifier, tmp_path):
    outcome = fused("selection", "fp32", verifier, tmp_path)
    # Our kernel keeps the NaN where the written code puts it, so it may run; PyTorch's fused call never may.
    assert "scaled_dot_product_attention" not in " ".join(outcome.candidate.library_calls), outcome.message
    ours = any("attention kernel of our own" in note for note in outcome.candidate.notes)
    kept = outcome.attention is False and MASKED_NAN in outcome.message and MASKED_NAN in outcome.plan_text
    assert ours or kept, (outcome.message, outcome.candidate.notes)
