"""The attention kernel of our own built for the host CPU (g++) and run against eager PyTorch's attention.

The host harness of the reduction kernels (``test_template_rows_host``: a thread per CUDA thread, barriers
for ``__syncthreads`` and the warp shuffles) runs the generated kernel at small sizes: partial query and key
tiles, a causal mask, values narrower than the keys, bf16, and the adversarial inputs (NaN, ±Inf, large,
denormal values) the Verifier plants. The reference is the function in float64 with PyTorch's GPU kernels'
handling of the mask: a masked key is left out of both products, so NaN or Inf there reaches no row that masks
it (the CPU's own attention kernel differs from the GPU's there, so it is not the reference).
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
trace_handler = pytest.importorskip("stitch_lsp.worker.trace_handler")

from stitch_lsp.coders.template import lower  # noqa: E402
from stitch_lsp.plan.gemm_tiles import GemmOptions  # noqa: E402
from tests.agents import test_template_pointwise_host as host  # noqa: E402
from tests.agents import test_template_rows_host as rows  # noqa: E402

pytestmark = [pytest.mark.timeout(900),
              pytest.mark.skipif(host.GXX is None or host.INCLUDE is None, reason="needs g++ and the CUDA headers")]

SOURCE = '''
import torch
import torch.nn as nn
import torch.nn.functional as F

class Model(nn.Module):
    def forward(self, q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal={causal}, scale={scale})


class Block(nn.Module):  # q, k and v split from one projection inside forward, as nanoGPT's attention has them
    def __init__(self):
        super().__init__()
        self.c_attn = nn.Linear({h} * {d}, 3 * {h} * {d})

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(C, dim=2)
        q = q.view(B, T, {h}, C // {h}).transpose(1, 2)
        k = k.view(B, T, {h}, C // {h}).transpose(1, 2)
        v = v.view(B, T, {h}, C // {h}).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, is_causal={causal}, scale={scale})
        return y.transpose(1, 2).contiguous().view(B, T, C)

def get_inputs():
    if {block}:
        return [torch.randn({b}, {tq}, {h} * {d}).to({dtype})]
    if {split}:  # q, k and v as a model passes them: heads split from one projection and transposed
        qkv = torch.randn({b}, {tq}, 3, {h}, {d}).to({dtype})
        return [qkv[:, :, i].transpose(1, 2) for i in range(3)]
    return [torch.randn({b}, {h}, {tq}, {d}).to({dtype}), torch.randn({b}, {h}, {tk}, {d}).to({dtype}),
            torch.randn({b}, {h}, {tk}, {dv}).to({dtype})]

def get_init_inputs():
    return []
'''

CASES = {
    # 70 queries: a partial query tile; 70 keys: a partial second key tile; the diagonal crosses both.
    "causal-fp32": dict(b=1, h=2, tq=70, tk=70, d=16, dv=16, causal=True, scale=None, dtype="torch.float32"),
    "cross-fp32": dict(b=2, h=1, tq=20, tk=90, d=12, dv=24, causal=False, scale=0.3, dtype="torch.float32"),
    # Two queries a head (a transformer over a batch of 2 as its sequence): 8 query rows a block.
    "two-queries-fp32": dict(b=5, h=2, tq=2, tk=2, d=16, dv=16, causal=False, scale=None, dtype="torch.float32"),
    # Read in place at the caller's strides: no copy of q, k or v first.
    "split-heads-fp32": dict(b=2, h=3, tq=70, tk=70, d=8, dv=8, causal=True, scale=None, dtype="torch.float32",
                             split=True),
    # Read in place from the projection's output, through the split, the views and the transposes.
    "projected-fp32": dict(b=2, h=3, tq=70, tk=70, d=8, dv=8, causal=True, scale=None, dtype="torch.float32",
                           block=True),
}


def reference(q, k, v, causal, scale):
    q, k, v = q.double(), k.double(), v.double()
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    keep = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool)
    keep = keep.tril() if causal else keep
    p = torch.softmax(((q @ k.transpose(-2, -1)) * scale).masked_fill(~keep, float("-inf")), dim=-1)
    terms = (p.unsqueeze(-1) * v.unsqueeze(-3)).masked_fill(~keep[..., None], 0.0)  # [..., query, key, column]
    return terms.sum(-2)


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_attention_kernel_matches_the_function_on_the_host(case, tmp_path, monkeypatch):
    from stitch_lsp.coders.template.program import program_data
    from stitch_lsp.worker import inputs as inp
    from stitch_lsp.worker.verify.compare import compare

    params = {"split": False, "block": False, **CASES[case]}
    source = SOURCE.format(**params)
    if params["block"]:
        source = source.replace("class Model(nn.Module):", "class Unused(nn.Module):").replace("class Block(", "class Model(")
    reply = trace_handler.trace_task(source)
    assert reply.ok, reply.message
    program = lower(reply.graph, GemmOptions(mode="cublas"))
    kernels = [k for k in program.kernels if k.kind == "attention"]
    assert len(kernels) == 1, program.notes
    (kernel,) = kernels
    assert bool(kernel.strided) == params["split"]
    assert ("in place" in kernel.note) == (params["split"] or params["block"])
    if params["split"]:
        # (batch, head, position, element) of a (2, 70, 3, 3, 8) projection's slice, transposed
        assert list(kernel.strided.values()) == [[70 * 72, 8, 72, 1]] * 3
    if params["block"]:  # q, k and v are read from the projection itself, at offsets 0, C and 2C
        (projection,) = set(kernel.params[:3])
        assert "addmm" in projection or "linear" in projection, kernel.params
        assert "QB[4] = {0, " in kernel.source and "KB[4] = {24, " in kernel.source and "VB[4] = {48, " in kernel.source
    monkeypatch.setattr(host, "_driver", rows._driver)
    ns: dict = {}
    exec(compile(source, "task", "exec"), ns)
    for case_name in ("random", "nan", "inf", "large", "denormal"):
        torch.manual_seed(1)
        values = ns["get_inputs"]()
        if case_name != "random":
            values = inp.adversarial(values, case_name, 3)
        model = ns["Model"]().eval()
        state = [t.detach() for t in list(model.parameters()) + list(model.buffers())]
        if params["block"]:
            with torch.no_grad():
                qkv = model.c_attn(values[0]).split(values[0].shape[-1], dim=2)
            heads = [t.view(params["b"], params["tq"], params["h"], params["d"]).transpose(1, 2) for t in qkv]
            want = reference(*heads, params["causal"], params["scale"]).transpose(1, 2).reshape(values[0].shape)
        else:
            want = reference(*values, params["causal"], params["scale"])
        got = host._run_program(program_data(program), state + [v.clone() for v in values], tmp_path)
        result = compare(want.to(got.dtype), got, ref64=want)
        assert result.passed, f"{case_name}: {result.detail}"


WRITTEN = '''
import math
import torch
import torch.nn as nn
import torch.nn.functional as F

class Model(nn.Module):  # minGPT's attention, from q, k and v on
    def __init__(self):
        super().__init__()
        self.register_buffer("bias", torch.tril(torch.ones(80, 80)).view(1, 1, 80, 80))

    def forward(self, q, k, v):
        T = q.size(-2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float('-inf'))
        att = F.softmax(att, dim=-1)
        return att @ v

def get_inputs():
    return [torch.randn(1, 2, 70, 16).to(DTYPE), torch.randn(1, 2, 70, 16).to(DTYPE), torch.randn(1, 2, 70, 16).to(DTYPE)]

def get_init_inputs():
    return []
'''


@pytest.mark.parametrize("dtype", ["torch.float32", "torch.bfloat16"])
def test_attention_written_by_hand_keeps_its_nan_and_inf_at_masked_keys(dtype, tmp_path, monkeypatch):
    """As written, a masked key's probability 0 times v still adds: NaN or Inf in v there reaches every row that
    masks it. The kernel for a folded hand-written attention keeps that, in the tile on the diagonal and past it
    (in bf16 too: there PyTorch's fused call, which leaves masked keys out, cannot stand in for it)."""
    from stitch_lsp.coders.template.program import program_data
    from stitch_lsp.worker.verify.compare import compare

    source = WRITTEN.replace("DTYPE", dtype)
    reply = trace_handler.trace_task(source)
    assert reply.ok, reply.message
    program = lower(reply.graph, GemmOptions(mode="cublas"))
    (kernel,) = [k for k in program.kernels if k.kind == "attention"]
    assert "as in the written code" in kernel.note
    monkeypatch.setattr(host, "_driver", rows._driver)
    # Large bf16 inputs: eager rounds the scores to bf16 and picks other maxima than the exact fp32 scores do
    # (the Verifier judges that case against float64); here eager itself is the reference.
    cases = ("random", "nan", "inf", "large") if dtype == "torch.float32" else ("random", "nan", "inf")
    host.check_against_eager(source, program, cases, tmp_path)
    ns: dict = {}
    exec(compile(source, "task", "exec"), ns)
    model = ns["Model"]().eval()
    torch.manual_seed(2)
    q, k, v = ns["get_inputs"]()
    v[0, 0, 69, 3] = float("nan")  # past every other row's diagonal, in the last tile
    v[0, 1, 30, 5] = float("inf")  # in the first tile: rows 0-29 mask it (NaN), rows 30-69 read it (Inf)
    with torch.no_grad():
        want = model(q, k, v)
    got = host._run_program(program_data(program), [model.bias, q, k, v], tmp_path)
    assert torch.isnan(want[0, 0, :, 3]).all() and torch.isnan(want[0, 1, :30, 5]).all()
    result = compare(want, got)
    assert result.passed, result.detail
