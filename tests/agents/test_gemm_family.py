"""The GEMM kernel family on the CPU: which GEMMs and epilogues it takes, the Triton source it writes,
the tiles it picks and caches, and (Triton's interpreter) that the kernels compute what eager does."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import types
from pathlib import Path

import pytest

from stitch_lsp.coders.template import candidate_module, lower
from stitch_lsp.plan.gemm_spec import GEMM_OP, spec_of
from stitch_lsp.plan.gemm_tiles import (
    CACHE_VERSION, GemmOptions, TileCache, TileEntry, candidates, fit, problem_key, record, table_tile,
)
from stitch_lsp.coders.template.gemm_tune import tune_cases
from stitch_lsp.coders.template.program import program_data
from stitch_lsp.contract.gemm_tune import TuneReply, TuneResult
from gemm_interpret_cases import INTERPRETED, task  # noqa: E402 - the cases, shared with the interpreter run

REPO = Path(__file__).resolve().parents[2]
torch = pytest.importorskip("torch")
trace_handler = pytest.importorskip("stitch_lsp.worker.trace_handler")

TRITON = GemmOptions(mode="triton")


def gemm_specs(program):
    return [spec_of(n) for n in program.graph.nodes if n.op == GEMM_OP]


# ------------------------------------------------------------------------------------------ lowering


def test_fp32_gemm_and_its_epilogue_become_one_triton_kernel_at_fp32_accuracy():
    _, graph = task("return F.gelu(self.lin(x)) * self.scale")
    program = lower(graph, TRITON)
    (kernel,) = program.kernels
    assert kernel.backend == "triton" and kernel.kind == "gemm"
    assert program.uncovered_ops == []
    assert 'input_precision="tf32x3"' in kernel.source  # three TF32 products, not one
    assert "tl.erf(" in kernel.source  # the exact GELU, not the tanh form
    assert kernel.source.count("tl.store(") == 2  # one store, in each of the two launch forms (persistent or not)
    (spec,) = gemm_specs(program)
    assert [e.op for e in spec.epilogue] == ["aten.gelu.default", "aten.mul.Tensor"]
    assert spec.accs[0].b_trans and spec.accs[0].bias  # the weight read in place, the bias in the epilogue
    assert not any(n.op in ("aten.addmm.default", "aten.permute.default") for n in program.graph.nodes)
    compile(kernel.source, "kernel", "exec")


def test_reference_with_tf32_allowed_gets_one_tf32_pass():
    _, graph = task("return torch.relu(self.lin(x))")
    graph.allow_tf32 = True
    (spec,) = gemm_specs(lower(graph, TRITON))
    assert spec.precision == "tf32"


def test_half_precision_one_pass_and_rounded_like_eager():
    _, graph = task("return F.silu(self.lin(x))", dtype="float16")
    (kernel,) = lower(graph, TRITON).kernels
    assert "input_precision" not in kernel.source
    assert ".to(tl.float16).to(tl.float32)" in kernel.source  # each half-precision result rounded


def test_auto_takes_fp32_gemms_and_half_precision_ones_only_where_measured_faster(tmp_path):
    big = dict(m=1024, k=1024, n=1024, dtype="bfloat16")
    _, tanh_gelu = task("return F.gelu(self.lin(x), approximate='tanh')", **big)
    _, silu = task("return F.silu(self.lin(x))", **big)
    _, plain_fp32 = task("return self.lin(x)", m=1024, k=1024, n=1024)
    cache = TileCache.in_workspace(tmp_path)
    auto = GemmOptions(mode="auto", gpu="H100", cache=cache)
    assert gemm_specs(lower(plain_fp32, auto))  # 3xTF32 beats cuBLAS's fp32 GEMM by itself
    assert not gemm_specs(lower(tanh_gelu, auto))  # cuBLASLt applies bias + tanh-GELU itself
    assert "aten._addmm_activation.default" in [n.op for n in lower(tanh_gelu, auto).graph.nodes]
    assert not gemm_specs(lower(silu, auto))  # bf16, not measured: cuBLAS and a fused pass after it
    (spec,) = gemm_specs(lower(silu, TRITON))
    key = problem_key(spec, "H100")
    cache.put(key, TileEntry(tile=[128, 256, 64, 8, 8, 3], kernel_us=26.0, gpu="H100", library_us=25.0))
    assert gemm_specs(lower(silu, auto))  # 26 µs fused < 25 µs cuBLAS + the SiLU's own pass (1.4 µs)
    cache.put(key, TileEntry(tile=[128, 256, 64, 8, 8, 3], kernel_us=27.0, gpu="H100", library_us=25.0))
    assert not gemm_specs(lower(silu, auto))
    assert not gemm_specs(lower(silu, GemmOptions(mode="cublas")))
    _, tiny = task("return torch.relu(self.lin(x))", m=16, k=32, n=16)
    assert not gemm_specs(lower(tiny, auto))  # a launch costs more than such a GEMM


def test_chunked_projection_and_two_projections_of_one_input_share_a_kernel():
    _, geglu = task("v, g = self.lin(x).chunk(2, dim=-1)\n        return v * F.gelu(g)", n=96)
    (spec,) = gemm_specs(lower(geglu, TRITON))
    assert sorted(a.offset for a in spec.accs) == [0, 48] and spec.n == 48
    assert len({a.b for a in spec.accs}) == 1
    _, swiglu = task("return F.silu(self.lin(x)) * self.up(x)")
    (spec,) = gemm_specs(lower(swiglu, TRITON))
    assert len(spec.accs) == 2 and len({a.b for a in spec.accs}) == 2 and spec.outputs == [spec.epilogue[-1].name]


def test_row_reductions_fuse_when_a_tile_spans_the_row_else_read_the_stored_value():
    body = "y = torch.tanh(self.lin(x) * 2.0)\n        return torch.softmax(y, dim=-1)"
    _, narrow = task(body, n=80)
    program = lower(narrow, TRITON)
    (spec,) = gemm_specs(program)
    assert spec.reduces_rows and [k.kind for k in program.kernels] == ["gemm"]
    source = program.kernels[0].source
    assert "tl.max(" in source and "tl.sum(" in source
    # A NaN global would fail Triton's check, at every launch, that a kernel's globals are unchanged.
    assert "(_INF - _INF)" in source and "float(\"nan\")" not in source
    assert spec.tile[1] == 128  # one tile as wide as the row (80 columns, a power of two)
    _, wide = task(body, n=512)
    program = lower(wide, TRITON)
    (spec,) = gemm_specs(program)
    assert [e.op for e in spec.epilogue] == ["aten.mul.Tensor", "aten.tanh.default"]
    assert [k.kind for k in program.kernels] == ["gemm", "row_reduction"]
    assert "_st_tanh" in program.kernels[0].source  # written with exp / log: no libdevice


def test_values_read_after_the_gemm_are_outputs_and_getitems_keep_their_names():
    _, graph = task("y = self.lin(x)\n        return y, torch.relu(y)")
    program = lower(graph, TRITON)
    (spec,) = gemm_specs(program)
    assert len(spec.outputs) == 2
    data = program_data(program)
    (step,) = [s for s in data["steps"] if "triton" in s]
    assert step["tuple"] and [o[0] for o in step["outputs"]] == spec.outputs
    assert [s["name"] for s in data["steps"] if s.get("op") == "getitem"] == spec.outputs


def test_the_embedded_graph_is_the_traced_one_so_other_shapes_relower():
    t, graph = task("return F.gelu(self.lin(x))")
    program = lower(graph, TRITON)
    module = candidate_module(t, program)
    assert '"aten.addmm.default"' in module and GEMM_OP not in module.split("_GRAPH = ")[1]
    assert "Triton" in module.split('"""')[1]  # the header names the runtime dependency


# ------------------------------------------------------------------------------------------ tiles


def test_table_tiles_by_class_and_fitted_to_small_problems():
    _, graph = task("return torch.relu(self.lin(x))", m=4096, k=1024, n=4096)
    (spec,) = gemm_specs(lower(graph, TRITON))
    assert table_tile(spec) == [128, 64, 32, 8, 4, 4]
    _, small = task("return torch.relu(self.lin(x))", m=40, k=24, n=72)
    (s,) = gemm_specs(lower(small, TRITON))
    bm, bn, bk = fit([128, 64, 32, 8, 4, 4], s)[:3]
    assert (bm, bn, bk) == (64, 64, 32)  # no block wider than the next power of two of its dimension
    assert table_tile(s)[:2] == [32, 32]  # 6 programs even so: the smallest tile the fill goes to
    tiles = candidates(spec)
    assert tiles[0] == table_tile(spec) and len(tiles) == len({tuple(t) for t in tiles}) >= 5


def test_short_k_half_precision_also_tries_persistent_tiles():
    def tiles(k, dtype):
        _, graph = task("return F.gelu(self.lin(x))", m=8192, k=k, n=4096, dtype=dtype)
        (spec,) = gemm_specs(lower(graph, TRITON))
        return candidates(spec)

    short = tiles(1024, "bfloat16")
    persistent = [t for t in short if len(t) > 6]
    # Each of the first three candidates, and 128x128 at three stages at two programs an SM.
    assert [t[:6] for t in persistent] == [t[:6] for t in short[:3]] + [[128, 128, 64, 8, 8, 3]]
    assert {t[6] for t in persistent} == {132, 264}
    assert [128, 128, 64, 8, 8, 3, 264] in persistent
    assert all(len(t) == 6 for t in tiles(4096, "bfloat16"))  # 64 steps of K: the fill is a small share
    assert all(len(t) == 6 for t in tiles(1024, "float32"))


def test_a_gemm_too_small_to_fill_the_gpu_also_tries_smaller_tiles():
    # A GPT block's MLP projection at an editor's sizes: 512 x 256 outputs are 16 programs of 128 x 64.
    _, graph = task("return self.lin(x) + x[:, :256]", m=512, k=1024, n=256)
    (spec,) = gemm_specs(lower(graph, TRITON))
    tiles = candidates(spec)
    programs = [-(-512 // t[0]) * -(-256 // t[1]) for t in tiles]
    assert sorted(t[:2] for t in tiles if t[0] * t[1] < 64 * 64) == [[32, 32], [32, 64]]
    assert max(programs) == 128  # halved until the grid is as full as a 32 x 32 tile makes it
    assert table_tile(spec)[:2] == [32, 32]  # untuned, the first tile that keeps half the SMs busy
    _, qkv = task("return self.lin(x)", m=512, k=256, n=768)
    (spec,) = gemm_specs(lower(qkv, TRITON))
    assert table_tile(spec)[:2] == [64, 64]  # 96 programs; 128 x 64 would be 48
    small = [t for t in tiles if t[0] * t[1] < 64 * 64]
    assert small and all(t[4] == 2 for t in small)  # two warps for a tile of 32 x 64 or less
    # A GEMM that fills the GPU at the table's tile is timed on the usual candidates only.
    _, big = task("return F.gelu(self.lin(x))", m=8192, k=1024, n=4096)
    (spec,) = gemm_specs(lower(big, TRITON))
    assert all(t[0] * t[1] >= 64 * 64 for t in candidates(spec))


def test_problem_key_depends_on_what_is_computed_not_on_names():
    _, a = task("return F.gelu(self.lin(x))")
    _, b = task("y = self.lin(x)\n        z = F.gelu(y)\n        return z")
    _, c = task("return F.silu(self.lin(x))")
    key = [problem_key(gemm_specs(lower(g, TRITON))[0], "H100") for g in (a, b, c)]
    assert key[0] == key[1] != key[2]
    assert problem_key(gemm_specs(lower(a, TRITON))[0], "A100") != key[0]


def test_cache_round_trip_and_a_measured_tile_is_used(tmp_path):
    _, graph = task("return F.gelu(self.lin(x))", m=1024, k=1024, n=1024)
    (spec,) = gemm_specs(lower(graph, TRITON))
    cache = TileCache.in_workspace(tmp_path)
    (case,) = tune_cases([spec], "H100")
    assert case.inputs == [([1024, 1024], "float32"), ([1024, 1024], "float32"), ([1024], "float32")]
    assert case.library and case.library[0].b_trans and case.library[0].bias
    best = [64, 64, 32, 8, 4, 4]
    reply = TuneReply(ok=True, results=[TuneResult(key=case.key, timings_us={"x": 90.0}, best=best, best_us=90.0,
                                                   library_us=120.0)])
    assert record(reply, cache, "H100")
    data = json.loads((tmp_path / ".stitch" / "gemm_tiles.json").read_text())
    assert data["version"] == CACHE_VERSION and data["entries"][case.key]["tile"] == best
    fresh = GemmOptions(mode="auto", gpu="H100", cache=TileCache.in_workspace(tmp_path))
    (chosen,) = gemm_specs(lower(graph, fresh))
    assert chosen.tile == best and chosen.tile_source == "cache"
    (kernel,) = lower(graph, fresh).kernels
    assert "measured here" in kernel.note
    # Measured slower than cuBLAS alone: auto leaves the GEMM to cuBLAS.
    cache.put(case.key, TileEntry(tile=best, kernel_us=150.0, gpu="H100", library_us=120.0))
    assert not gemm_specs(lower(graph, GemmOptions(mode="auto", gpu="H100", cache=TileCache.in_workspace(tmp_path))))


def test_a_cache_from_another_version_is_ignored(tmp_path):
    (tmp_path / ".stitch").mkdir()
    (tmp_path / ".stitch" / "gemm_tiles.json").write_text(json.dumps({"version": 0, "entries": {"k": {}}}))
    assert TileCache.in_workspace(tmp_path).entries() == {}


# ------------------------------------------------------------------------------------------ kernels, interpreted

@pytest.fixture(scope="module")
def interpreted(tmp_path_factory):
    """Every case run once by ``gemm_interpret_cases.py`` in a fresh process: Triton reads TRITON_INTERPRET
    when it is first imported, and tracing here may have imported it already."""
    pytest.importorskip("triton")
    out = tmp_path_factory.mktemp("interpret")
    env = {**os.environ, "TRITON_INTERPRET": "1", "STITCH_KERNEL_CACHE": str(out / "kernels"),
           "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, str(Path(__file__).with_name("gemm_interpret_cases.py")), str(out)],
                          env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads((out / "results.json").read_text())


@pytest.mark.parametrize("name", [c[0] for c in INTERPRETED])
def test_generated_kernel_computes_what_eager_does(interpreted, name):
    result = interpreted[name]
    assert result["error"] == "", result["error"]
    assert result["backends"] and set(result["backends"]) == {"triton"}
    for out in result["outputs"]:
        assert out["shape_ok"] and out["dtype_ok"]
        assert out["max_err"] <= out["tol"] * (1 + out["scale"]), out


def test_a_model_built_with_other_constructor_arguments_computes_with_them(interpreted):
    """The scale in the GEMM's epilogue and the pool's size come from the constructor: a fused module built
    with other arguments (as the Verifier's second shape builds it) computes with those, not the traced ones."""
    result = interpreted["constructor_args"]
    assert result["error"] == "", result["error"]
    same, other = result["calls"]
    assert not same["retraced"] and other["retraced"]
    for call in (same, other):
        assert call["backends"] == ["torch", "triton"], call  # the GEMM and its scale in the Triton kernel
        assert call["shape_ok"] and call["max_err"] <= 1e-4 * (1 + call["scale"]), call


def test_inference_mode_trace_folds_batchnorm_into_the_epilogue_and_drops_dropout():
    source = TEMPLATE_BN
    reply = trace_handler.trace_task(source)
    assert reply.ok, reply.message
    ops = [n.op for n in reply.graph.nodes]
    assert not any("bernoulli" in op or "batch_norm" in op for op in ops), ops
    (spec,) = gemm_specs(lower(reply.graph, TRITON))
    assert {"aten.sub.Tensor", "aten.mul.Tensor", "aten.add.Tensor"} <= {e.op for e in spec.epilogue}


TEMPLATE_BN = """
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(48, 80)
        self.bn = nn.BatchNorm1d(80)
        self.drop = nn.Dropout(0.2)

    def forward(self, x):
        return torch.relu(self.drop(self.bn(self.lin(x))))

def get_inputs():
    return [torch.randn(64, 48)]

def get_init_inputs():
    return []
"""


class _FakePool:
    """A worker pool that answers ``gemm_tune`` with one measured tile per case."""

    def __init__(self):
        self.asked = []

    def call(self, kind, request, reply_cls, **kw):
        self.asked.append((kind, request))
        return TuneReply(ok=True, gpu="H100", results=[
            TuneResult(key=c.key, timings_us={"t": 10.0}, best=c.tiles[-1].tile, best_us=10.0, library_us=20.0)
            for c in request.cases])


def test_tuning_job_records_a_tile_per_kernel_and_the_next_fuse_uses_it(tmp_path):
    from stitch_lsp.fuse.service import tune_gemm_tiles
    from stitch_lsp.coders.template import TemplateCoder
    from stitch_lsp.fuse.service import untuned_gemms
    from stitch_lsp.plan.planner import make_plan

    t, graph = task("return F.gelu(self.lin(x))", m=1024, k=1024, n=1024)
    options = GemmOptions(mode="auto", gpu="H100", cache=TileCache.in_workspace(tmp_path))
    before = TemplateCoder(options).generate(t, make_plan(t, graph, gemm=options))
    assert untuned_gemms(before) == 1
    pool = types.SimpleNamespace(pool=_FakePool())
    lines = tune_gemm_tiles(graph, options, pool)
    assert pool.pool.asked[0][0] == "gemm_tune" and len(lines) == 1 and "µs" in lines[0]
    fresh = GemmOptions(mode="auto", gpu="H100", cache=TileCache.in_workspace(tmp_path))
    after = TemplateCoder(fresh).generate(t, make_plan(t, graph, gemm=fresh))
    assert untuned_gemms(after) == 0
    assert tune_gemm_tiles(graph, fresh, pool) == ["every GEMM kernel's tile is measured already"]
