"""The attention kernel of our own: which calls it takes, why it leaves the others to PyTorch, and that every
variant it writes compiles with nvcc. (Its results on a GPU: ``test_attention_kernel_gpu.py``.)"""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from stitch_lsp.coders.template.attention.kernel import attention_kernel, query_rows
from stitch_lsp.coders.template.attention.probs_kernel import probs_kernel
from stitch_lsp.plan.attention import PROBS
from stitch_lsp.coders.template.emitter import Unsupported
from stitch_lsp.coders import ATTENTION_LIBRARY as LIBRARY
from stitch_lsp.op_graph import GraphInput, OpGraph, OpNode
from stitch_lsp.coders.template import lower

SDPA = "aten.scaled_dot_product_attention.default"


def sdpa_graph(b=2, h=4, tq=256, tk=None, d=64, dv=None, dtype="float32", causal=True, mask=None, dropout=0.0,
               scale=None):
    tk, dv = tk or tq, dv or d
    inputs = [GraphInput(name="q", shape=(b, h, tq, d), dtype=dtype, role="input", index=0),
              GraphInput(name="k", shape=(b, h, tk, d), dtype=dtype, role="input", index=1),
              GraphInput(name="v", shape=(b, h, tk, dv), dtype=dtype, role="input", index=2)]
    node = OpNode(name="attn", op=SDPA, args_json=json.dumps([{"$": "q"}, {"$": "k"}, {"$": "v"}, mask, dropout,
                                                              causal]),
                  kwargs_json=json.dumps({"scale": scale}), shape=(b, h, tq, dv), dtype=dtype)
    return OpGraph(inputs=inputs, nodes=[node], outputs=["attn"])


def test_an_attention_call_becomes_one_kernel_of_our_own_and_library_keeps_pytorchs():
    graph = sdpa_graph()
    program = lower(graph)
    (kernel,) = program.kernels
    assert kernel.kind == "attention" and kernel.params == ["q", "k", "v", "attn"]
    assert "attention kernel of our own" in kernel.note and "causal" in kernel.note
    assert not program.blocking_ops and not program.library_calls
    # 2 x 4 heads of 256 queries: 16 query rows a block, so 128 blocks fill most of an H100's 132 SMs.
    assert kernel.grid == 8 * 16 and kernel.block == 128 and kernel.shared > 0
    kept = lower(graph, attention=LIBRARY)
    assert kept.kernels == [] and any(SDPA in c for c in kept.library_calls)


def test_query_rows_grow_only_once_the_gpu_is_full():
    assert query_rows(8, 256) == 16
    assert query_rows(24, 256) == 32
    assert query_rows(48, 256) == 64
    assert query_rows(1576, 2) == 8 and query_rows(40, 20) == 16  # no more rows than the queries need


@pytest.mark.parametrize("change, why", [
    ({"mask": {"$": "q"}}, "mask tensor"),
    ({"dropout": 0.1}, "dropout"),
    ({"d": 256}, "head sizes"),
    ({"d": 62}, "head sizes"),
    ({"dtype": "float64"}, "float64"),
    ({"dtype": "bfloat16"}, "FlashAttention"),  # a call in bf16 / fp16: PyTorch's tensor-core kernel is faster
])
def test_what_the_kernel_does_not_take_stays_pytorchs_and_says_why(change, why):
    graph = sdpa_graph(**change)
    with pytest.raises(Unsupported, match=why):
        attention_kernel(graph.nodes[0], graph.index(), "k")
    program = lower(graph)
    assert program.kernels == [] and program.library_calls


VARIANTS = [dict(), dict(dtype="bfloat16"), dict(dtype="float16", causal=False), dict(d=128, tq=1024, h=12),
            dict(tq=100, tk=300, d=32, dv=96, causal=False), dict(tq=77, d=80, causal=True, scale=0.5),
            dict(b=197, h=8, tq=2, d=64, causal=False)]


@pytest.mark.nvcc
@pytest.mark.parametrize("variant", VARIANTS, ids=[json.dumps(v) for v in VARIANTS])
def test_every_variant_compiles_with_nvcc_without_spilling(variant, tmp_path):
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("nvcc not on PATH")
    graph = sdpa_graph(**variant)
    compiles_without_spilling(nvcc, attention_kernel(graph.nodes[0], graph.index(), "stitch_attention_t", written=True),
                              tmp_path)


def compiles_without_spilling(nvcc: str, spec, tmp_path) -> None:
    path = tmp_path / "attention.cu"
    path.write_text(spec.source)
    out = subprocess.run([nvcc, "-arch=sm_90", "-c", "-Xptxas", "-v", "-o", str(tmp_path / "a.o"), str(path)],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "0 bytes spill stores" in out.stderr, out.stderr[-2000:]


PROBS_VARIANTS = [dict(), dict(dtype="bfloat16"), dict(d=128, tq=1024, h=12), dict(tq=100, tk=302, d=32, causal=False),
                  dict(b=4, h=12), dict(b=8, h=12, tq=512),  # 64 scores a thread: 32 rows of 256, 16 of 512
                  dict(tq=77, d=80, dtype="float16")]


def probs_graph(b=2, h=4, tq=256, tk=None, d=64, dtype="float32", causal=True, scale=0.125):
    tk = tk or tq
    inputs = [GraphInput(name="q", shape=(b, h, tq, d), dtype=dtype, role="input", index=0),
              GraphInput(name="k", shape=(b, h, tk, d), dtype=dtype, role="input", index=1)]
    node = OpNode(name="att", op=PROBS, args_json=json.dumps([{"$": "q"}, {"$": "k"}, causal]),
                  kwargs_json=json.dumps({"scale": scale}), shape=(b, h, tq, tk), dtype=dtype)
    return OpGraph(inputs=inputs, nodes=[node], outputs=["att"])


def test_the_probabilities_kernel_refuses_what_it_cannot_write_and_says_why():
    for change, why in [({"d": 62}, "head size"), ({"dtype": "float64"}, "float64"),
                        ({"tk": 100}, "shape")]:  # causal over 256 queries and 100 keys: not a square mask
        graph = probs_graph(**change)
        with pytest.raises(Unsupported, match=why):
            probs_kernel(graph.nodes[0], graph.index(), "k", graph)


@pytest.mark.nvcc
@pytest.mark.parametrize("variant", PROBS_VARIANTS, ids=[json.dumps(v) for v in PROBS_VARIANTS])
def test_every_probabilities_variant_compiles_with_nvcc_without_spilling(variant, tmp_path):
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("nvcc not on PATH")
    graph = probs_graph(**variant)
    compiles_without_spilling(nvcc, probs_kernel(graph.nodes[0], graph.index(), "stitch_attention_probs_t", graph),
                              tmp_path)
