"""The attention kernel of our own against PyTorch's fused attention, measured when the candidate is verified.

A candidate whose attention runs as our kernel is generated again with PyTorch's fused attention when the
Verifier refuses it, when it is slower than eager, or when ``torch.compile`` is faster across its whole 95%
interval; the faster candidate that passes is offered, and the edit re-lowers the way it was judged. The
Verifier is a stand-in that answers by what the candidate is; the task is traced once in this process.
"""

from __future__ import annotations

import pytest

from stitch_lsp.fuse import service as fuse_service
from stitch_lsp.fuse.fallbacks import MASKED_NAN, uses_attention_kernel
from stitch_lsp.fuse.service import fuse_task
from stitch_lsp.pipeline import Task
from stitch_lsp.settings import Settings
from tests.llm.verifiers import SplitVerifier, behind_compile, correct, incorrect

trace_handler = pytest.importorskip("stitch_lsp.worker.trace_handler")

# Attention as nanoGPT calls it, with a residual add after it for the Coder to fuse.
SOURCE = """
import torch
import torch.nn as nn
import torch.nn.functional as F

class Model(nn.Module):
    def forward(self, q, k, v, x):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True) * 0.5 + x

def get_inputs():
    return [torch.randn(2, 4, 256, 64) for _ in range(4)]

def get_init_inputs():
    return []
"""


def traced(monkeypatch, source: str) -> None:
    """The fuse service traces ``source`` once, here, whatever it is asked."""
    reply = trace_handler.trace_task(source)
    assert reply.ok, reply.message
    monkeypatch.setattr(fuse_service, "trace", lambda *a, **k: reply)


@pytest.fixture(autouse=True)
def traced_here(monkeypatch):
    traced(monkeypatch, SOURCE)


def fuse(tmp_path, ours, library, source: str = SOURCE):
    """Fused with a stand-in Verifier that answers ``ours`` for a candidate with an attention kernel of our own,
    ``library`` for the other; and the candidates it saw."""
    verifier = SplitVerifier(uses_attention_kernel, ours, library)
    task = Task(name="attention", source=source, origin_path="model.py")
    outcome = fuse_task(task, Settings(), verifier=verifier, workdir=tmp_path,
                        edit_namer=lambda _o: ("stitch_kernels/fused_attention.py", "fused_attention"))
    return outcome, verifier.seen


def module_of(outcome):
    (text,) = [t for p, t in outcome.edit_files.items() if p.endswith("fused_attention.py")]
    return text


def test_a_faster_kernel_of_our_own_is_offered_without_a_second_candidate(tmp_path):
    outcome, seen = fuse(tmp_path, correct(2.0), correct(1.2))
    assert len(seen) == 1 and uses_attention_kernel(outcome.candidate) and outcome.offerable
    assert "attention kernel of our own" in "\n".join(outcome.candidate.notes)
    assert "_ATTENTION = True" in module_of(outcome)


def test_a_kernel_behind_torch_compile_gives_way_to_pytorchs_attention_when_that_is_faster(tmp_path):
    outcome, seen = fuse(tmp_path, behind_compile(1.05, 0.85), correct(1.3))
    first, second = seen
    assert uses_attention_kernel(first) and not uses_attention_kernel(second)
    assert outcome.candidate is second and outcome.offerable
    assert "0.85x torch.compile" in outcome.message and "PyTorch's fused attention" in outcome.message
    assert "attention runs as PyTorch's fused attention" in outcome.plan_text
    # The edit re-lowers for other shapes the way it was judged: attention left to PyTorch.
    assert "_ATTENTION = 'library'" in module_of(outcome)


def test_a_slow_kernel_stays_when_pytorchs_attention_is_no_faster(tmp_path):
    outcome, seen = fuse(tmp_path, behind_compile(1.05, 0.85), correct(1.01))
    assert len(seen) == 2 and uses_attention_kernel(outcome.candidate) and outcome.offerable
    assert "no faster" in outcome.message


def test_a_refused_kernel_falls_back_to_pytorchs_attention(tmp_path):
    outcome, seen = fuse(tmp_path, incorrect({"seed-2": 0.5}), correct(1.1))
    assert len(seen) == 2 and not uses_attention_kernel(outcome.candidate) and outcome.offerable
    assert "did not pass the Verifier" in outcome.message


def test_nan_beyond_the_mask_skips_pytorchs_attention_which_behaves_the_same():
    from stitch_lsp.fuse.fallbacks import attention_fallback_reason, attention_kernel_reason
    from stitch_lsp.pipeline import Candidate

    candidate = Candidate(module_source="", cuda_sources={"stitch_attention_a.cu": ""}, coder="template",
                          pattern_calls=["attention ..."])
    verdict = incorrect({"adversarial-nan": float("nan")})
    assert attention_kernel_reason(candidate, verdict) == ""
    assert attention_fallback_reason(candidate, verdict) == MASKED_NAN
