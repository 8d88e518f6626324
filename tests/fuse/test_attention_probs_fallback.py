"""Attention's probabilities as one kernel of our own against the scores GEMM on cuBLAS and a softmax kernel,
measured when the candidate is verified, as the attention kernel is against PyTorch's fused attention. The
Verifier is a stand-in that answers by what the candidate is; the task is traced once in this process."""

from __future__ import annotations

import pytest

from stitch_lsp.fuse import service as fuse_service
from stitch_lsp.fuse.fallbacks import uses_attention_kernel
from stitch_lsp.fuse.service import fuse_task
from stitch_lsp.pipeline import Task
from stitch_lsp.settings import Settings
from tests.llm.verifiers import SplitVerifier, behind_compile, correct

trace_handler = pytest.importorskip("stitch_lsp.worker.trace_handler")

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
    reply = trace_handler.trace_task(SOURCE)
    assert reply.ok, reply.message
    monkeypatch.setattr(fuse_service, "trace", lambda *a, **k: reply)


def fuse(tmp_path, ours, library):
    verifier = SplitVerifier(uses_attention_kernel, ours, library)
    outcome = fuse_task(Task(name="probs", source=SOURCE, origin_path="model.py"), Settings(), verifier=verifier,
                        workdir=tmp_path, edit_namer=lambda _o: ("stitch_kernels/fused_probs.py", "fused_probs"))
    return outcome, verifier.seen


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
