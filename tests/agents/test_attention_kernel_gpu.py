"""On a GPU: the attention kernel of our own against a float64 answer, beside PyTorch's own attention.

    python -m pytest -q -m gpu tests/agents/test_attention_kernel_gpu.py

Each case launches the generated kernel as the binding does and compares it with softmax(q·kᵀ·scale [+ causal
mask])·v computed in float64. It must be at least about as close to that answer as PyTorch's
``scaled_dot_product_attention`` in the same dtype is; NaN in v beyond the causal mask must not reach a row
that masks it.
"""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

from stitch_lsp.coders.template.attention.kernel import attention_kernel  # noqa: E402
from tests.agents.test_attention_kernel import VARIANTS, sdpa_graph  # noqa: E402

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

# The nanoGPT / minGPT block sizes, a long sequence and what VARIANTS compiles.
CASES = [dict(), dict(b=4, h=12, tq=1024, d=64, dtype="bfloat16"), dict(b=1, h=2, tq=2048, d=128, dtype="float16"),
         *VARIANTS]
SLACK = {"float32": 1e-5, "bfloat16": 2e-2, "float16": 2e-3}


def run(spec, q, k, v, shape):
    from stitch_lsp.runtime.loader import load_kernel

    kernel = load_kernel(spec.source, spec.name)
    out = torch.empty(shape, dtype=q.dtype, device=q.device)
    kernel((spec.grid, 1, 1), (spec.block, 1, 1), [q.contiguous(), k.contiguous(), v.contiguous(), out],
           shared_mem=spec.shared)
    torch.cuda.synchronize()
    return out


def reference(q, k, v, causal, scale):
    q, k, v = q.double(), k.double(), v.double()
    s = (q @ k.transpose(-2, -1)) * scale
    if causal:
        keep = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool, device=q.device).tril()
        s = s.masked_fill(~keep, float("-inf"))
    return torch.softmax(s, dim=-1) @ v


def inputs(graph, seed=0):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    dtype = getattr(torch, graph.inputs[0].dtype)
    return [torch.randn(i.shape, generator=gen, device="cuda", dtype=torch.float32).to(dtype) for i in graph.inputs]


@pytest.mark.parametrize("case", CASES, ids=[str(c) for c in CASES])
def test_the_kernel_is_as_close_to_float64_as_pytorchs_attention(case):
    graph = sdpa_graph(**case)
    node = graph.nodes[0]
    spec = attention_kernel(node, graph.index(), "stitch_attention_t", written=True)  # 16-bit too
    q, k, v = inputs(graph)
    causal, scale = node.args[5], node.kwargs.get("scale")
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    ours = run(spec, q, k, v, node.shape)
    want = reference(q, k, v, causal, scale)
    torch_out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)
    ours_err = (ours.double() - want).abs().max().item()
    torch_err = (torch_out.double() - want).abs().max().item()
    assert torch.isfinite(ours).all()
    assert ours_err <= 2 * torch_err + SLACK[str(q.dtype).removeprefix("torch.")], (ours_err, torch_err)


def test_nan_in_v_beyond_the_causal_mask_stays_out_of_the_rows_that_mask_it():
    graph = sdpa_graph(b=1, h=2, tq=130, d=64)
    spec = attention_kernel(graph.nodes[0], graph.index(), "stitch_attention_nan")
    q, k, v = inputs(graph, seed=1)
    v[:, :, 100] = float("nan")   # key 100: rows 0-99 mask it, rows 100-129 read it
    k[:, :, 120] = float("inf")   # key 120: an Inf score only rows from 120 on can see
    out = run(spec, q, k, v, graph.nodes[0].shape)
    assert torch.isfinite(out[:, :, :100]).all()
    assert torch.isnan(out[:, :, 100:]).all()
