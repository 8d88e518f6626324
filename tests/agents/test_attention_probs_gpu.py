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
from tests.agents.test_attention_probs_host import causal

# nanoGPT's sizes: 2 sequences of 256, 4 heads of 64.
SOURCE = causal("torch.float32", b=2, t=256, h=4, d=64, max_len=256)


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
