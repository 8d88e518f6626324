"""What a tuning run times for the GEMM family: each distinct problem's Triton kernel with every candidate tile
(the worker's ``gemm_tune`` job runs them; ``plan.gemm_tiles.record`` keeps the fastest)."""

from __future__ import annotations

from stitch_lsp.coders.template.gemm_triton import kernel_name, kernel_source, launch
from stitch_lsp.coders.template.lower import lower
from stitch_lsp.contract.gemm_tune import LibraryGemm, TuneCase, TuneTile
from stitch_lsp.op_graph import OpGraph
from stitch_lsp.plan.gemm_spec import GEMM_OP, GemmSpec, spec_of
from stitch_lsp.plan.gemm_tiles import GemmOptions, candidates, problem_key


def untuned_specs(graph: OpGraph, gemm: GemmOptions) -> list[GemmSpec]:
    """The graph's GEMM-family kernels (as the template Coder lowers it) whose tile is not measured yet."""
    specs = [spec_of(n) for n in lower(graph, gemm).graph.nodes if n.op == GEMM_OP]
    return [s for s in specs if s.tile_source != "cache"]


def tune_cases(specs: list[GemmSpec], gpu: str) -> list[TuneCase]:
    """One case per distinct problem: the kernel's source and every candidate tile."""
    cases: dict[str, TuneCase] = {}
    for spec in specs:
        key = problem_key(spec, gpu)
        if key in cases:
            continue
        name = kernel_name(spec)
        tiles = []
        for tile in candidates(spec):
            grid, meta, warps, stages = launch(spec, tile)
            tiles.append(TuneTile(tile=tile, grid=grid, meta={**meta, "num_warps": warps, "num_stages": stages}))
        firsts = {acc.gemm: acc for acc in reversed(spec.accs)}  # each GEMM once, as cuBLAS would run it
        library = [LibraryGemm(m=spec.m, n=acc.n_full, k=spec.k, b_trans=acc.b_trans, bias=bool(acc.bias))
                   for acc in firsts.values()]
        cases[key] = TuneCase(key=key, name=name, source=kernel_source(spec, name), inputs=spec.input_specs(),
                              outputs=[(list(s), d) for s, d in zip(spec.output_shapes, spec.output_dtypes)],
                              tiles=tiles, dtype=spec.dtype, library=library)
    return list(cases.values())
