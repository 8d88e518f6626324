"""Attention's probabilities as one kernel of our own against the scores GEMM on cuBLAS and a softmax kernel,
measured when the candidate is verified, as the attention kernel is against PyTorch's fused attention. The
Verifier is a stand-in that answers by what the candidate is; the task is traced once in this process."""

from __future__ import annotations

import pytest

from stitch_lsp.fuse.fallbacks import uses_attention_kernel
from tests.fuse.test_attention_kernel_fallback import fuse as fuse_with, traced
from tests.llm.verifiers import behind_compile, correct

# nanoGPT's manual attention selected up to the softmax.
SOURCE = """
import math
import torch
import torch.nn as nn
import torch.nn.functional as F

class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("bias", torch.tril(torch.ones(256, 256)).view(1, 1, 256, 256))

    def forward(self, q, k):
        T = q.size(-2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float('-inf'))
        return F.softmax(att, dim=-1)

def get_inputs():
    return [torch.randn(2, 4, 256, 64), torch.randn(2, 4, 256, 64)]

def get_init_inputs():
    return []
"""


@pytest.fixture(autouse=True)
def traced_here(monkeypatch):
    traced(monkeypatch, SOURCE)


def fuse(tmp_path, ours, library):
    return fuse_with(tmp_path, ours, library, SOURCE)


def test_the_probabilities_kernel_is_offered_when_it_is_the_faster(tmp_path):
    outcome, seen = fuse(tmp_path, correct(2.0), correct(1.2))
    assert len(seen) == 1 and uses_attention_kernel(outcome.candidate) and outcome.offerable
    assert "attention probabilities, a kernel of our own" in "\n".join(outcome.candidate.notes)


def test_behind_torch_compile_it_gives_way_to_the_scores_gemm_and_softmax(tmp_path):
    outcome, seen = fuse(tmp_path, behind_compile(1.05, 0.85), correct(1.3))
    first, second = seen
    assert uses_attention_kernel(first) and not uses_attention_kernel(second)
    assert outcome.candidate is second and outcome.offerable
    assert "The scores GEMM on cuBLAS and a softmax kernel: " in outcome.message, outcome.message
    assert "the attention probabilities' kernel of our own passed but ran at 0.85x torch.compile" in outcome.message
    assert "PyTorch's fused attention" not in outcome.message


def test_the_plan_says_the_probabilities_run_as_one_kernel_and_the_fallbacks_plan_says_not(tmp_path):
    outcome, _ = fuse(tmp_path, correct(2.0), correct(1.2))
    assert "attention probabilities 2x4 heads, 256 queries x 256 keys, head size 64" in outcome.plan_text
    assert "one kernel of our own that reads q and k" in outcome.plan_text
    # The offered candidate's plan is the one it was lowered from: the scores GEMM, then the softmax kernel.
    fallen, _ = fuse(tmp_path / "again", behind_compile(1.05, 0.85), correct(1.3))
    assert "attention_probs" not in fallen.plan_text and "row_reduction" in fallen.plan_text
    assert "attention runs as the scores GEMM on cuBLAS and a softmax kernel" in fallen.plan_text
