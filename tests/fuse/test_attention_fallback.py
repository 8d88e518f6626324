"""Hand-written causal attention taken as one scaled_dot_product_attention call whose candidate the
Verifier does not pass is generated again with the attention as written, judged, and offered in its place.

On the GPU the fused attention kernels skip masked positions, so NaN or Inf planted in v beyond the
causal mask does not reach the output, while the written code's ``att @ v`` carries it there (0 * NaN).
The CPU build's SDPA propagates it as eager does, so the Verifier here is a stand-in that fails the
fused call's candidate as the H200 did; the task is traced once here.
"""

from __future__ import annotations

import pytest

from stitch_lsp.fuse import service as fuse_service
from stitch_lsp.fuse.fallbacks import MASKED_NAN, attention_fallback_reason
from stitch_lsp.fuse.service import fuse_task
from stitch_lsp.pipeline import Task
from stitch_lsp.settings import Settings
from stitch_lsp.verdict import CompileResult, Correctness, Trial, Verdict, VerdictStatus
from tests.llm.verifiers import SplitVerifier, correct, large_trial_failed

trace_handler = pytest.importorskip("stitch_lsp.worker.trace_handler")

SOURCE = """
import math
import torch
import torch.nn as nn
import torch.nn.functional as F

class Model(nn.Module):
    def __init__(self, max_len):
        super().__init__()
        self.register_buffer("bias", torch.tril(torch.ones(max_len, max_len)).view(1, 1, max_len, max_len))
        self.attn_dropout = nn.Dropout(0.1)

    def forward(self, q, k, v):
        T = q.size(-2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float('-inf'))
        att = self.attn_dropout(F.softmax(att, dim=-1))
        return att @ v

def get_inputs():
    return [torch.randn(2, 4, 32, 16), torch.randn(2, 4, 32, 16), torch.randn(2, 4, 32, 16)]

def get_init_inputs():
    return [64]
"""


def masked_nan_failed() -> Verdict:
    """The H200's verdict on the fused call: every random trial passes, NaN and Inf in v do not land."""
    trials = [Trial(f"seed-{i}", True) for i in range(1, 6)]
    trials += [Trial(f"adversarial-{case}", False, kind="adversarial", mismatches=280,
                     detail="NaN in 280 places where the reference differs") for case in ("nan", "inf")]
    return Verdict(VerdictStatus.INCORRECT, summary="incorrect: 2 of 10 checks failed; first: adversarial-nan",
                   compile=CompileResult(ok=True, backend="nvrtc"),
                   correctness=Correctness(status="failed", trials=trials, dtype="float32"))


def Judge(fused_call: Verdict, as_written: Verdict) -> SplitVerifier:  # noqa: N802 - reads as a class
    return SplitVerifier(lambda c: bool(c.pattern_calls), fused_call, as_written)


@pytest.fixture(autouse=True)
def traced_here(monkeypatch):
    reply = trace_handler.trace_task(SOURCE)
    assert reply.ok, reply.message
    monkeypatch.setattr(fuse_service, "trace", lambda *a, **k: reply)


def fuse(tmp_path, verifier):
    return fuse_task(Task(name="attn", source=SOURCE, origin_path="model.py"), Settings(), verifier=verifier,
                     workdir=tmp_path, edit_namer=lambda _o: ("stitch_kernels/fused_attn.py", "fused_attn"),
                     verify_library_only=True)


def test_a_fused_attention_call_that_misplaces_nan_gives_way_to_the_attention_as_written(tmp_path):
    verifier = Judge(masked_nan_failed(), correct(1.2))
    outcome = fuse(tmp_path, verifier)
    first, second = verifier.seen
    assert first.pattern_calls and "scaled_dot_product_attention" in first.pattern_calls[0]
    assert not second.pattern_calls
    assert outcome.offerable and outcome.candidate is second and outcome.attention is False
    # The user reads why, in one sentence, in the message and in the plan.
    assert MASKED_NAN in outcome.message and outcome.message.startswith("Fused")
    assert f"attention not taken as one fused call: {MASKED_NAN}" in outcome.plan_text
    assert not any(g.kind == "attention" for g in outcome.plan.groups)
    # The candidate and the edit re-lower without the fused call for other shapes too.
    assert "_ATTENTION = False" in second.module_source and "_ATTENTION = True" in first.module_source
    (module,) = [t for p, t in outcome.edit_files.items() if p.endswith("fused_attn.py")]
    assert "_ATTENTION = False" in module and "scaled_dot_product_attention" not in module
    kept = tmp_path / ".stitch" / "tasks" / outcome.task.key() / "attention_fused_call" / "verdict.json"
    assert kept.exists()


def test_a_fused_attention_call_that_passes_stays(tmp_path):
    verifier = Judge(correct(1.5), correct(1.1))
    outcome = fuse(tmp_path, verifier)
    assert len(verifier.seen) == 1 and outcome.candidate.pattern_calls and outcome.offerable
    assert not outcome.attention_fallback and outcome.attention is True


def test_when_the_attention_as_written_fails_too_the_first_judgement_stands_and_both_reasons_are_given(tmp_path):
    outcome = fuse(tmp_path, Judge(masked_nan_failed(), large_trial_failed(0.7, 33, 4096)))
    assert not outcome.offerable and outcome.candidate.pattern_calls
    assert MASKED_NAN in outcome.message
    assert "the attention as written did not pass either (failed adversarial-large" in outcome.message


def test_the_reason_names_the_masked_positions_only_when_nan_or_inf_was_misplaced():
    class Called:
        coder, pattern_calls = "template", ["attention ... -> scaled_dot_product_attention(is_causal=True)"]

    assert attention_fallback_reason(Called(), masked_nan_failed()) == MASKED_NAN
    other = attention_fallback_reason(Called(), large_trial_failed(0.7, 33, 4096))
    assert other.startswith("attention as one fused call did not pass the Verifier (failed adversarial-large")
    assert attention_fallback_reason(Called(), correct(1.2)) == ""
    Called.pattern_calls = []
    assert attention_fallback_reason(Called(), masked_nan_failed()) == ""
