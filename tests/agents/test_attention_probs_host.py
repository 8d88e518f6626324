"""Attention's probabilities alone (a softmax of masked, scaled scores, returned without ``@ v``) as one kernel of
our own, built for the host CPU (g++, a thread per CUDA thread) and run against eager PyTorch, on the Verifier's
adversarial inputs too: NaN or Inf among a row's kept scores makes the row NaN, a masked entry is exactly 0."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
trace_handler = pytest.importorskip("stitch_lsp.worker.trace_handler")

from stitch_lsp.coders import ATTENTION_LIBRARY  # noqa: E402
from stitch_lsp.coders.template import lower  # noqa: E402
from stitch_lsp.plan.gemm_tiles import GemmOptions  # noqa: E402
from tests.agents import test_template_pointwise_host as host  # noqa: E402
from tests.agents import test_template_rows_host as rows  # noqa: E402

pytestmark = [pytest.mark.timeout(900),
              pytest.mark.skipif(host.GXX is None or host.INCLUDE is None, reason="needs g++ and the CUDA headers")]

# nanoGPT's manual attention selected up to the softmax: q and k are heads split from one projection, so they
# arrive as transposed views; the causal mask is a registered tril buffer sliced to T.
CAUSAL = '''
import math
import torch
import torch.nn as nn
import torch.nn.functional as F

class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("bias", torch.tril(torch.ones({max_len}, {max_len})).view(1, 1, {max_len}, {max_len}))
        self.attn_dropout = nn.Dropout(0.1)

    def forward(self, q, k):
        T = q.size(-2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float('-inf'))
        att = F.softmax(att, dim=-1)
        return self.attn_dropout(att)

def get_inputs():
    qkv = torch.randn({b}, {t}, 3, {h}, {d}).to({dtype})
    return [qkv[:, :, 0].transpose(1, 2), qkv[:, :, 1].transpose(1, 2)]

def get_init_inputs():
    return []
'''

# Cross attention's weights: 20 queries over 90 keys (rows of 90 are not whole 16-byte stores), no mask, the
# scale written as a division.


def causal(dtype: str, b: int = 2, t: int = 70, h: int = 2, d: int = 16, max_len: int = 80) -> str:
    """The causal module's source at these sizes (B sequences of T, H heads of D) and dtype ("torch.float32")."""
    return CAUSAL.format(dtype=dtype, max_len=max_len, b=b, t=t, h=h, d=d)


CROSS = '''
import math
import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, q, k):
        return torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.size(-1)), dim=-1)

def get_inputs():
    return [torch.randn(1, 3, 20, 12), torch.randn(1, 3, 90, 12)]

def get_init_inputs():
    return []
'''

# Attention that also returns its weights: the fused call cannot stand for it, the probabilities' kernel can,
# and the second GEMM reads them.
WEIGHTS = '''
import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, q, k, v):
        att = torch.softmax((q @ k.transpose(-2, -1)) * 0.3, dim=-1)
        return att @ v, att

def get_inputs():
    return [torch.randn(2, 2, 33, 8), torch.randn(2, 2, 33, 8), torch.randn(2, 2, 33, 8)]

def get_init_inputs():
    return []
'''

CASES = ("random", "nan", "inf", "large", "denormal")


def lowered(source: str, attention=True):
    reply = trace_handler.trace_task(source)
    assert reply.ok, reply.message
    return lower(reply.graph, GemmOptions(mode="cublas"), attention=attention)


def probs_kernels(program):
    return [k for k in program.kernels if k.name.startswith("stitch_attention_probs_")]


def two_passes(monkeypatch):
    """The kernel for keys too many to hold: two passes over them, the scores computed twice."""
    from stitch_lsp.coders.template.attention import probs_kernel

    monkeypatch.setattr(probs_kernel, "ONE_PASS_SCORES", 0)


@pytest.mark.parametrize("passes", [1, 2])
@pytest.mark.parametrize("dtype", ["torch.float32", "torch.bfloat16"])
def test_causal_probabilities_are_one_kernel_reading_q_and_k_in_place_and_match_eager(dtype, passes, tmp_path,
                                                                                      monkeypatch):
    if passes == 2:
        two_passes(monkeypatch)
    source = causal(dtype)
    program = lowered(source)
    (kernel,) = probs_kernels(program)
    assert ("one pass" in kernel.note) == (passes == 1), kernel.note
    # No GEMM, no copy of q or k, no softmax kernel: the probabilities' one kernel is the whole program.
    index = program.graph.index()
    torch_ops = {index[n].op for s in program.steps if s.kernel is None for n in s.nodes}
    assert len(program.kernels) == 1 and not torch_ops & {"aten.bmm.default", "aten.clone.default"}, torch_ops
    assert "reads q and k in place" in kernel.note and kernel.strided
    assert any(n.startswith("attention probabilities 2x2 heads, 70 queries x 70 keys") for n in program.notes)
    monkeypatch.setattr(host, "_driver", rows._driver)
    host.check_against_eager(source, program, CASES if dtype == "torch.float32" else ("random", "nan", "inf"),
                             tmp_path)


@pytest.mark.parametrize("passes", [1, 2])
def test_a_nan_in_a_key_reaches_only_the_rows_that_keep_that_key(passes, tmp_path, monkeypatch):
    from stitch_lsp.coders.template.program import program_data
    from stitch_lsp.worker.verify.compare import compare

    if passes == 2:
        two_passes(monkeypatch)
    source = causal("torch.float32")
    program = lowered(source)
    monkeypatch.setattr(host, "_driver", rows._driver)
    ns: dict = {}
    exec(compile(source, "task", "exec"), ns)
    model = ns["Model"]().eval()
    torch.manual_seed(3)
    q, k = ns["get_inputs"]()
    k[0, 1, 66, 5] = float("nan")  # key 66: rows 66-69 keep it (NaN rows), rows 0-65 mask it
    with torch.no_grad():
        want = model(q, k)
    got = host._run_program(program_data(program), [model.bias, q, k], tmp_path)
    assert torch.isnan(got[0, 1, 66:]).all() and not torch.isnan(got[0, 1, :66]).any()
    assert (got[0, 1, :66, 66:] == 0).all()  # masked: exactly 0
    assert compare(want, got).passed


@pytest.mark.parametrize("passes", [1, 2])
def test_cross_attention_weights_with_rows_not_whole_stores_match_eager(passes, tmp_path, monkeypatch):
    if passes == 2:
        two_passes(monkeypatch)
    program = lowered(CROSS)
    (kernel,) = probs_kernels(program)
    assert "20 queries x 90 keys" in kernel.note and "causal" not in kernel.note
    monkeypatch.setattr(host, "_driver", rows._driver)
    host.check_against_eager(CROSS, program, CASES, tmp_path)


def test_attention_that_returns_its_weights_keeps_the_second_gemm_reading_them(tmp_path, monkeypatch):
    program = lowered(WEIGHTS)
    assert len(probs_kernels(program)) == 1, program.notes
    assert not program.pattern_calls  # not one fused call: the weights are returned
    monkeypatch.setattr(host, "_driver", rows._driver)
    host.check_against_eager(WEIGHTS, program, ("random", "nan", "large"), tmp_path)


def test_with_attention_left_to_the_library_the_scores_gemm_and_softmax_stay():
    """The attention kernel's fallback generates the candidate again this way, to time it against the kernel."""
    program = lowered(causal("torch.float32"), attention=ATTENTION_LIBRARY)
    assert not probs_kernels(program)
    assert any(k.kind == "row_reduction" for k in program.kernels)


def test_scores_read_besides_the_softmax_are_not_folded():
    source = CROSS.replace("return torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.size(-1)), dim=-1)",
                           "s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))\n        return torch.softmax(s, dim=-1), s")
    assert not probs_kernels(lowered(source))
