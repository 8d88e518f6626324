"""Attention written out by hand is planned as one scaled_dot_product_attention call, where that is exact.

Each case is a small transformer block of our own, traced on the meta device as the bench traces a
task. Where the block is taken, the generated program (GEMMs left to cuBLAS, so nothing but PyTorch
calls remain) runs on the CPU and must match eager; where it is not exactly attention (ReLU in place
of the softmax, a mask that is not causal, another mask value, weights also returned), the plan says
why and the block stays as it was.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
trace_handler = pytest.importorskip("stitch_lsp.worker.trace_handler")

from stitch_lsp.plan.attention import SDPA, fold_attention  # noqa: E402
from stitch_lsp.plan.planner import describe, make_plan  # noqa: E402
from stitch_lsp.coders.template import lower  # noqa: E402
from stitch_lsp.pipeline import Task  # noqa: E402
from tests.agents.library_program_host import run_library_program  # noqa: E402
from stitch_lsp.task.precision import cast_source  # noqa: E402

BLOCK = '''
import math
import torch
import torch.nn as nn
import torch.nn.functional as F

class Model(nn.Module):
    def __init__(self, n_embd, n_head, max_len):
        super().__init__()
        self.qkv = nn.Linear(n_embd, 3 * n_embd)
        self.proj = nn.Linear(n_embd, n_embd)
        self.drop = nn.Dropout(0.1)
        self.register_buffer("mask", MASK)
        self.n_head = n_head
        self.n_embd = n_embd

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.qkv(x).split(self.n_embd, dim=2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        MASKING
        att = ACTIVATION
        att = self.drop(att)
        y = att @ v
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return RETURN

batch, seq, n_embd, n_head, max_len = 2, 24, 32, 4, 40

def get_inputs():
    return [torch.randn(batch, seq, n_embd)]

def get_init_inputs():
    return [n_embd, n_head, max_len]
'''
TRIL_BUFFER = "torch.tril(torch.ones(max_len, max_len)).view(1, 1, max_len, max_len)"
BUFFER_MASKING = "att = att.masked_fill(self.mask[:, :, :T, :T] == 0, float('-inf'))"


def block(mask=TRIL_BUFFER, masking=BUFFER_MASKING, activation="F.softmax(att, dim=-1)", returns="self.proj(y)"):
    return (BLOCK.replace("MASKING", masking).replace("MASK", mask).replace("ACTIVATION", activation)
            .replace("RETURN", returns))


def traced(source):
    reply = trace_handler.trace_task(source)
    assert reply.ok, reply.message
    return reply.graph


def plan_of(source):
    return make_plan(Task(name="attention", source=source), traced(source))


def run_on_cpu(source):
    """The candidate's program (cuBLAS GEMMs: PyTorch calls only) against eager, on the CPU."""
    return run_library_program(source, traced(source), "attention")


def attention_groups(plan):
    return [g for g in plan.groups if g.kind == "attention"]


def test_causal_self_attention_with_a_tril_buffer_is_one_sdpa_call_and_matches_eager():
    source = block()
    plan = plan_of(source)
    (group,) = attention_groups(plan)
    assert group.ops == [SDPA]
    assert "is_causal=True" in group.note and "scale=0.353553" in group.note and "buffer mask" in group.note
    assert "Exact:" in group.note and "fused attention" in group.note
    # The softmax is no kernel of its own any more: the block's only non-GEMM work was the attention.
    assert not [g for g in plan.groups if g.kind in ("row_reduction", "pointwise")]
    text = describe(plan)
    assert "attention" in text and "scaled_dot_product_attention" in text
    program, want, got = run_on_cpu(source)
    sdpa = [n for n in program.graph.nodes if n.op == SDPA]
    assert len(sdpa) == 1 and sdpa[0].args[5] is True
    assert got.shape == want.shape
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("masking", [
    "att = att.masked_fill(torch.triu(torch.ones(T, T, device=x.device), diagonal=1).bool(), float('-inf'))",
    "att = att.masked_fill(torch.tril(torch.ones(T, T, device=x.device)) == 0, float('-inf'))",
])
def test_a_causal_mask_made_in_forward_is_proved_causal(masking):
    source = block(masking=masking)
    (group,) = attention_groups(plan_of(source))
    assert "is_causal=True" in group.note and "made in forward" in group.note
    _, want, got = run_on_cpu(source)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_attention_without_a_mask_is_sdpa_without_is_causal():
    source = block(masking="pass")
    (group,) = attention_groups(plan_of(source))
    assert "is_causal=False" in group.note
    _, want, got = run_on_cpu(source)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("change, why", [
    ({"activation": "F.relu(att)"}, None),  # ReLU self-attention: no softmax, not attention
    ({"mask": "(torch.arange(max_len * max_len).view(1, 1, max_len, max_len) % 3 > 0).float()"},
     "the mask is not a causal triangle"),
    ({"mask": "torch.triu(torch.ones(max_len, max_len)).view(1, 1, max_len, max_len)"},
     "the mask is not a causal triangle"),
    ({"masking": BUFFER_MASKING.replace("float('-inf')", "-1e9")}, "the masked value is not -inf"),
    ({"mask": "torch.triu(torch.ones(max_len, max_len), diagonal=1).view(1, 1, max_len, max_len)"},
     "the mask keeps the upper triangle"),
    ({"returns": "self.proj(y), att"}, "its scores or probabilities are also read elsewhere"),
])
def test_what_is_not_exactly_attention_stays_as_written_and_the_plan_says_why(change, why):
    source = block(**change)
    plan = plan_of(source)
    assert attention_groups(plan) == []
    assert not any(n.op == SDPA for n in lower(traced(source)).graph.nodes)
    notes = "\n".join(plan.notes)
    if why is None:
        assert "attention-like block not taken" not in notes
    else:
        assert f"attention-like block not taken: {why}" in notes
    # What exists still covers it: the masked softmax or the ReLU becomes a kernel of its own.
    assert [g for g in plan.groups if g.kind in ("row_reduction", "pointwise")]


def test_the_block_in_bf16_is_sdpa_in_bf16():
    graph = traced(cast_source(block(), "bf16"))
    folded, matches, _ = fold_attention(graph)
    (match,) = matches
    assert match.dtype == "bfloat16" and match.causal and match.shape == (2, 4, 24, 8)
    assert [n.dtype for n in folded.nodes if n.op == SDPA] == ["bfloat16"]


def test_the_sdpa_call_follows_the_graph_to_other_shapes():
    from stitch_lsp.coders.template.program import program_for
    from stitch_lsp.serde import to_json

    graph = traced(block())
    assert graph.symbolic
    # The mask buffer's size is symbolic here (a model built with another max_len re-lowers, not re-traces).
    shapes = [(1, 1, 57, 57) if i.path == "mask" else tuple(i.shape) for i in graph.inputs]
    data = program_for(to_json(graph), shapes, "cublas")
    (kernel,) = [s for s in data["steps"] if s.get("kernel", "").startswith("stitch_attention_")]
    assert "CAUSAL = true" in data["sources"][kernel["kernel"]]
    data = program_for(to_json(graph), shapes, "cublas", attention="library")
    (call,) = [s for s in data["steps"] if s.get("op") == SDPA]
    assert call["args"][5] is True


def test_one_row_of_a_tril_buffer_broadcast_over_the_rows_is_no_causal_mask():
    source = block(masking="att = att.masked_fill(self.mask[:, :, :1, :T] == 0, float('-inf'))")
    plan = plan_of(source)
    assert attention_groups(plan) == []
    assert "attention-like block not taken: the mask is not a causal triangle" in "\n".join(plan.notes)
