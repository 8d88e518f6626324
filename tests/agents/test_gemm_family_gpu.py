"""The GEMM family's kernels on a GPU: eager's answers at fp32 accuracy (3xTF32) where plain TF32 fails the
fp32 tolerance, half-precision epilogues, a tuning run that caches its tile, and an accepted edit that runs
without Stitch."""

from __future__ import annotations

import importlib.util
import sys
import types
from pathlib import Path

import pytest

from gemm_interpret_cases import task

pytestmark = [pytest.mark.gpu, pytest.mark.timeout(600)]
torch = pytest.importorskip("torch")
REPO = Path(__file__).resolve().parents[2]


def _candidate(body: str, **kw):
    from stitch_lsp.coders.template import candidate_module, lower
    from stitch_lsp.plan.gemm_tiles import GemmOptions

    t, graph = task(body, **kw)
    program = lower(graph, GemmOptions(mode="triton"))
    assert any(k.backend == "triton" for k in program.kernels), program.notes
    module = types.ModuleType("candidate")
    exec(compile(candidate_module(t, program), "candidate", "exec"), module.__dict__)
    return module, program


def _run(module, dtype=torch.float32):
    torch.manual_seed(0)
    with torch.device("cuda"):
        ref = module._reference.Model()
        mine = module.ModelNew()
        mine.load_state_dict(ref.state_dict())
        torch.manual_seed(1)
        inputs = module._reference.get_inputs()
    with torch.no_grad():
        return ref, mine, inputs, ref(*inputs), mine(*inputs)


def _err(out, ref64) -> float:
    return float((out.double() - ref64).abs().max())


FP32_CASES = {  # name: (forward, sizes, whether one TF32 pass must fail the fp32 tolerance there)
    "gelu_bias_scale_odd": ("return F.gelu(self.lin(x)) * self.scale", dict(m=1000, k=1000, n=520), False),
    "geglu": ("v, g = self.lin(x).chunk(2, dim=-1)\n        return v * F.gelu(g)", dict(m=512, k=2048, n=1024), True),
    "relu_k4096": ("return torch.relu(self.lin(x))", dict(m=256, k=4096, n=512), True),
    # Softmax divides the error down: TF32 passes there, so it only has to be no worse than eager.
    "softmax_after": ("return torch.softmax(torch.tanh(self.lin(x)) * 4.0, dim=-1)", dict(m=512, k=2048, n=256),
                      False),
}


@pytest.mark.parametrize("name", list(FP32_CASES))
def test_fp32_kernels_match_eager_at_fp32_accuracy(name):
    from stitch_lsp.worker.verify.compare import compare

    body, kw, tf32_fails = FP32_CASES[name]
    module, _ = _candidate(body, **kw)
    ref, mine, inputs, want, got = _run(module)
    result = compare(want, got)
    assert result.passed, result.detail
    ref64 = module._reference.Model().cuda().double()
    ref64.load_state_dict(ref.state_dict())
    with torch.no_grad():
        exact = ref64(*[x.double() for x in inputs])
        torch.backends.cuda.matmul.allow_tf32 = True
        try:
            tf32 = ref(*inputs)
        finally:
            torch.backends.cuda.matmul.allow_tf32 = False
    eager_err, ours_err = _err(want, exact), _err(got, exact)
    print(f"{name}: max error vs fp64: eager {eager_err:.3g}, 3xTF32 {ours_err:.3g}, TF32 {_err(tf32, exact):.3g}")
    assert ours_err <= 2 * eager_err
    if tf32_fails:
        assert not compare(want, tf32).passed  # one TF32 pass is not fp32 accuracy: the tolerance says so


def test_half_precision_epilogues_match_eager():
    from stitch_lsp.worker.verify.compare import compare

    for body, kw in [("return F.silu(self.lin(x)) * self.up(x)", dict(m=512, k=1024, n=1024, dtype="bfloat16")),
                     ("return r + 0.5 * self.lin(x)",
                      dict(m=512, k=1024, n=768, dtype="bfloat16", args="x, r",
                           inputs="torch.randn(512, 1024, dtype=DT), torch.randn(512, 768, dtype=DT)"))]:
        module, _ = _candidate(body, **kw)
        *_, want, got = _run(module)
        result = compare(want, got)
        assert result.passed, (body, result.detail)


def test_tuning_run_times_tiles_and_the_cache_steers_the_next_lowering(tmp_path):
    from stitch_lsp.coders.template import lower
    from stitch_lsp.plan.gemm_spec import GEMM_OP, spec_of
    from stitch_lsp.coders.template.gemm_tune import tune_cases
    from stitch_lsp.plan.gemm_tiles import GemmOptions, TileCache, record
    from stitch_lsp.contract.gemm_tune import TuneRequest
    from stitch_lsp.worker.gemm_tune_handler import tune

    _, graph = task("return F.gelu(self.lin(x))", m=1024, k=1024, n=1024)
    (spec,) = [spec_of(n) for n in lower(graph, GemmOptions(mode="triton")).graph.nodes if n.op == GEMM_OP]
    (case,) = tune_cases([spec], "gpu")
    case.tiles = case.tiles[:2]
    reply = tune(TuneRequest(cases=[case], parallel=2))
    assert reply.ok, reply.message
    (result,) = reply.results
    print(f"tiles: {result.timings_us}, cuBLAS alone {result.library_us} µs, compile s {result.compile_s}")
    assert len(result.timings_us) == 2 and result.best and result.library_us
    cache = TileCache.in_workspace(tmp_path)
    record(reply, cache, "gpu")
    (chosen,) = [spec_of(n) for n in lower(graph, GemmOptions(mode="triton", gpu="gpu", cache=cache)).graph.nodes
                 if n.op == GEMM_OP]
    assert chosen.tile == result.best and chosen.tile_source == "cache"


def test_accepted_edit_runs_without_stitch(tmp_path):
    from stitch_lsp.plan.planner import make_plan

    spec = importlib.util.spec_from_file_location("fuse_template_suite", REPO / "bench" / "fuse_template_suite.py")
    suite = importlib.util.module_from_spec(spec)
    sys.modules["fuse_template_suite"] = suite
    spec.loader.exec_module(suite)
    t, graph = task("return F.gelu(self.lin(x)) * self.scale", m=512, k=1024, n=512)
    entry = suite.edit_entry("gemm_edit", t.source, make_plan(t, graph), tmp_path)
    text = (tmp_path / (entry["module"].replace(".", "/") + ".py")).read_text()
    assert "Triton" in text.split('"""')[1]  # the header names the runtime dependency
    outcome = suite.run_edit_checks([entry], tmp_path, timeout_s=300)
    assert outcome == {"gemm_edit": "passed"}, outcome
