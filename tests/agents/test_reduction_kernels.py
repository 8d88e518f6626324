"""The shapes of the template Coder's reduction kernels: passes over the row, barriers, loads.

What a user would see as time: a GroupNorm row read once where a Hopper cluster holds it, else
twice (statistics, then outputs), not three times; LayerNorm's mean and variance behind one barrier; softmax dividing by a
reciprocal taken once; a boolean mask loaded 8 bytes at a time; middle-dimension
reductions loading 16 bytes a thread. Every kernel here is also compiled with nvcc.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from stitch_lsp.coders.template import lower, reduction_kernels as kernels
from stitch_lsp.coders.template.cuda_common import PREAMBLE
from stitch_lsp.coders.template.rows.analysis import variance_pairs

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.timeout(900)


def _graph(name: str):
    trace_handler = pytest.importorskip("stitch_lsp.worker.trace_handler")
    reply = trace_handler.trace_task((REPO / "bench" / "tasks" / f"{name}.py").read_text())
    assert reply.ok, reply.message
    return reply.graph


def _kernel(name: str, sm: int = 90):
    (spec,) = lower(_graph(name), sm=sm).kernels
    return spec


def _body(spec) -> str:
    return spec.source.split('extern "C"', 1)[1]


def test_groupnorm_on_hopper_reads_each_row_once_held_by_a_cluster():
    # 512 rows of 81920: too long for one block's registers, not for a cluster of 8 blocks of 512 threads
    # (sm_90), two blocks an SM.
    spec = _kernel("norm_groupnorm_silu_bf16")
    body = _body(spec)
    assert "__cluster_dims__(8, 1, 1) __launch_bounds__(512, 2)" in body and "holding it in registers" in spec.note
    assert not re.findall(r"for \(int it = ", body)  # no loop over the row: each element loaded once
    assert len(re.findall(r"stitch_ldv<8>\(in0 \+ c\d", body)) == 3  # a block's 20480 values, 8 a thread a time
    # The statistics in one pass: each block's moments, merged over the cluster through distributed shared memory.
    assert "stitch_moments_merge" in body and "stitch_cluster_ld(cx" in body
    assert body.count("stitch_cluster_sync()") == 2


def test_groupnorm_without_clusters_reads_each_row_twice_with_statistics_in_one_pass():
    spec = _kernel("norm_groupnorm_silu_bf16", sm=80)
    body = _body(spec)
    loops = re.findall(r"for \(int it = [^;]*;", body)
    assert len(loops) == 2, loops  # one statistics pass, one output pass
    assert "stitch_moments_merge" in body and body.count("__syncthreads()") == 1
    # The output pass walks the row backwards, so the chunks read last are read back first (from L2).
    assert loops[1].startswith("for (int it = 9;")
    # The per-channel weight and bias: one load per chunk of 8, not one per element.
    assert len(re.findall(r"stitch_ld\(in1,", body)) == 1 and len(re.findall(r"stitch_ld\(in2,", body)) == 1
    assert "statistics in one pass" in spec.note


def test_layernorm_mean_and_variance_share_one_barrier():
    body = _body(_kernel("norm_bias_residual_layernorm_fp32"))
    assert body.count("__syncthreads()") == 1
    assert "stitch_moments_local" in body


def test_softmax_divides_by_a_reciprocal_and_loads_the_mask_in_words():
    body = _body(_kernel("red_softmax_causal_bf16"))
    assert re.search(r"const float rcp_\w+ = 1\.f / \w+;", body)
    assert not re.search(r"\(\w+ / acc\d+\)", body)
    # 8 bools are one stitch_ldv<8> of unsigned char: an 8-byte word (see stitch_word in the preamble).
    assert "stitch_ldv<8>(in1 +" in body
    assert "stitch_word" in PREAMBLE and "uint2" in PREAMBLE


def test_variance_pairs_found_only_for_mean_and_squared_deviation():
    from stitch_lsp.plan.fusion import split

    graph = _graph("norm_bias_residual_layernorm_fp32")
    index = graph.index()
    (group,) = [g for g in split(graph) if g.kind == "row_reduction"]
    reductions = [n for n in group.nodes if index[n].op in ("aten.mean.dim", "aten.sum.dim_IntList")]
    pairs = variance_pairs(reductions, index)
    assert pairs == {reductions[1]: reductions[0]}
    rms = _graph("norm_rmsnorm_fp32")
    rindex = rms.index()
    (rgroup,) = [g for g in split(rms) if g.kind == "row_reduction"]
    assert variance_pairs([n for n in rgroup.nodes if rindex[n].op == "aten.mean.dim"], rindex) == {}


def test_row_configs_hold_four_16_byte_chunks_a_thread():
    assert kernels.row_config(4096, 8, 8192) == kernels.RowConfig(128, 256, False)  # bf16 RMSNorm row
    assert kernels.row_config(4096, 4, 8192) == kernels.RowConfig(256, 256, False)  # fp32
    assert kernels.row_config(1024, 8, 1 << 17) == kernels.RowConfig(32, 256, False)  # softmax: a warp per row
    assert kernels.row_config(81920, 8, 512).streamed  # GroupNorm's 160 KB rows


def test_middle_dimension_reduction_loads_16_bytes_a_thread():
    spec = _kernel("red_amax_middle_dim_bf16")
    body = _body(spec)
    assert "stitch_ldv<8>(in0 + c0" in body
    assert "8 rows a thread" in spec.note


@pytest.mark.nvcc
def test_forced_row_configs_compile(tmp_path):
    """Every launch shape the row kernel offers compiles, for a held, a streamed and a warp-per-row task."""
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("nvcc not on PATH")
    C = kernels.RowConfig
    cases = {"norm_bias_residual_layernorm_bf16": [C(128, 256, False), C(512, 512, False), C(256, 256, True)],
             "red_softmax_causal_fp32": [C(32, 128, False), C(64, 256, False)],
             "red_logsumexp_bf16": [C(1024, 1024, True), C(512, 512, False, prefetch=True)]}
    default, default_cluster = kernels.row_config, kernels.cluster_for
    kernels.cluster_for = lambda *a, **k: None  # the forced shapes, not a cluster
    try:
        for name, configs in cases.items():
            graph = _graph(name)
            for cfg in configs:
                kernels.row_config = lambda *a, _c=cfg: _c
                (spec,) = lower(graph).kernels
                assert spec.block == cfg.block
                path = tmp_path / f"{name}_{cfg.threads}_{cfg.block}_{int(cfg.streamed)}.cu"
                path.write_text(spec.source)
                out = subprocess.run([nvcc, "-arch=sm_90", "-c", "-o", str(path.with_suffix(".o")), str(path)],
                                     capture_output=True, text=True, timeout=300)
                assert out.returncode == 0, (path.name, out.stderr[-800:])
    finally:
        kernels.row_config, kernels.cluster_for = default, default_cluster
