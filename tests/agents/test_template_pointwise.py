"""Pointwise kernels of the template Coder: the math and launch shape they are written with (CPU only).

What the kernels compute is checked on a GPU by tests/fuse/test_fuse_gpu.py (the Verifier, adversarial
values included); here: which forms each kernel takes, so a regression in them shows without a GPU.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from stitch_lsp.coders.template import lower

REPO = Path(__file__).resolve().parents[2]
HALF_ONLY = ("stitch_exp_fast(", "stitch_div_fast(", "stitch_tanh_approx(", "stitch_gelu_erf_fast(", "__expf(")


def _trace(source: str):
    trace_handler = pytest.importorskip("stitch_lsp.worker.trace_handler")
    pytest.importorskip("torch")
    reply = trace_handler.trace_task(source)
    assert reply.ok, reply.message
    return reply.graph


@pytest.fixture(scope="module")
def bench():
    cache = {}

    def get(name: str):
        if name not in cache:
            cache[name] = _trace((REPO / "bench" / "tasks" / f"{name}.py").read_text())
        return cache[name]
    return get


def _kernel(graph):
    (kernel,) = lower(graph).kernels
    assert kernel.kind == "pointwise"
    return kernel, kernel.source.split('extern "C"', 1)[1]


def test_rotary_cat_takes_one_branch_per_chunk_and_loads_vectors(bench):
    """rotate_half's cat: the chunk's 8 lanes share a branch, the partner half comes as one 16-byte load."""
    kernel, body = _kernel(bench("pw_rotary_embedding_bf16"))
    assert "stitch_ld(" not in body  # no per-element scalar loads left
    assert body.count("stitch_ldv<8>") >= 5  # x, cos, sin, and x's other half in each branch
    assert len(re.findall(r"\bif \(", body)) == 2  # the bounds guard and one cat test, not one per element
    assert "__float2bfloat16_rn((-" not in body  # negating a bf16 value needs no rounding
    # slice-of-cat index maps recombine to "the element, 64 along": no re-derived coordinates per load
    assert re.search(r"stitch_ldv<8>\(in\d \+ \(\(c0 \+ 64\)\), ld\d+\)", body)
    assert re.search(r"stitch_ldv<8>\(in\d \+ \(\(c0 - 64\)\), ld\d+\)", body)


def test_activation_chain_uses_softplus_and_mish_forms(bench):
    """Softplus as log(1 + e^z) with its threshold, Mish's tanh(softplus) as n / (n + 2): no log1p / tanh / expm1."""
    _, body = _kernel(bench("pw_activation_zoo_bf16"))
    for slow in ("log1pf(", "tanhf(", "stitch_tanh_approx(", "expm1f(", " / 6"):
        assert slow not in body, slow
    assert "__logf(1.f + stitch_exp_fast(" in body
    assert re.search(r"stitch_div_fast\((v\d+), \1 \+ 2\.f\)", body)


@pytest.mark.parametrize("name", ["pw_activation_zoo_fp32", "pw_mish_hardswish_fp32", "pw_gelu_scale_fp32",
                                  "pw_geglu_fp32", "pw_rotary_embedding_fp32", "pw_scaled_residual_chain_fp32"])
def test_fp32_outputs_never_get_the_half_precision_approximations(bench, name):
    _, body = _kernel(bench(name))
    for approx in HALF_ONLY:
        assert approx not in body, approx
    assert "log1pf(" not in body and "expm1f(" not in body  # the cheaper forms are fp32-accurate ones


def test_eight_elements_a_thread_without_a_grid_stride_loop(bench):
    bf16, body = _kernel(bench("pw_bias_gelu_bf16"))
    assert "8-wide, 1 chunks/thread" in bf16.note and "for (" not in body
    fp32, _ = _kernel(bench("pw_gelu_scale_fp32"))
    assert "4-wide, 2 chunks/thread" in fp32.note
    assert bf16.grid * bf16.block * 8 >= 8192 * 11008  # one pass covers the tensor


DIVIDE = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x, w):
        y = x / w
        return {ret}


def get_inputs():
    return [torch.randn(64, 80), torch.rand(64, 80) + 0.5]


def get_init_inputs():
    return []
"""


def test_a_value_feeding_a_comparison_keeps_ieee_division():
    """(x / w > 0.5) must flip exactly where eager's does: that division stays IEEE, a plain one need not."""
    _, body = _kernel(_trace(DIVIDE.format(ret="torch.where(y > 0.5, y, 0.25 * y)")))
    assert "stitch_div(" not in body and re.search(r"\(\w+(\[\d\])? / \w+(\[\d\])?\)", body)
    _, body = _kernel(_trace(DIVIDE.format(ret="y * 3.0")))
    assert "stitch_div(" in body
