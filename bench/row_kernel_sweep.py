"""Row-kernel launch shapes side by side on a GPU: per task and RowConfig, correct? how fast?

    python bench/row_kernel_sweep.py [--budget-s 90] [--out DIR]

Each variant is the template Coder's candidate with ``kernels.row_config`` forced. It is
checked against the reference (2 seeds, then NaN, ±Inf and large values planted as the
Verifier does) and timed with L2 flushed before every call, medians of 7 interleaved
rounds, next to the default config and eager PyTorch (not torch.compile: see
fuse_template_suite.py). Inputs are drawn on the GPU. Writes ``row_sweep.json``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

import torch  # noqa: E402

import fuse_template_suite as suite  # noqa: E402
from stitch_lsp.plan.planner import make_plan  # noqa: E402
from stitch_lsp.coders.template import TemplateCoder, reduction_kernels as kernels  # noqa: E402
from stitch_lsp.pipeline import Task  # noqa: E402
from stitch_lsp.worker.trace_handler import trace_task  # noqa: E402

C = kernels.RowConfig
VARIANTS = {
    "norm_rmsnorm_bf16": [C(128, 256, False), C(256, 256, False), C(512, 512, False)],
    "norm_residual_rmsnorm_bf16": [C(128, 256, False), C(256, 256, False), C(512, 512, False)],
    "norm_bias_residual_layernorm_fp32": [C(256, 256, False), C(512, 512, False)],
    "norm_bias_residual_layernorm_bf16": [C(256, 256, False), C(512, 512, False)],
    "red_logsumexp_fp32": [C(1024, 1024, False, True), C(1024, 1024, True), C(512, 512, True)],
    "red_cross_entropy_bf16": [C(1024, 1024, False, True), C(1024, 1024, True), C(512, 512, True)],
    "red_logsumexp_bf16": [C(512, 512, False, True), C(1024, 1024, False)],
    "norm_groupnorm_silu_bf16": [C(512, 512, True)],
    "norm_groupnorm_silu_fp32": [C(512, 512, True)],
    "red_softmax_causal_bf16": [C(64, 256, False)],
}


def gpu_draw(ref_mod, seed: int):
    """The task's inputs drawn on the GPU (drawing 256 MB on the CPU takes seconds)."""
    torch.manual_seed(seed)
    with torch.device("cuda"):
        return [x.cuda() for x in ref_mod.get_inputs()]


def plant(values, case: str, seed: int):
    """The Verifier's adversarial cases (stitch_lsp.worker.inputs), drawn on the GPU."""
    gen = torch.Generator(device="cuda").manual_seed(seed)
    out = []
    for v in values:
        if not v.is_floating_point():
            out.append(v)
            continue
        flat = v.clone().view(-1)
        k = max(2, flat.numel() // 100)
        idx = torch.randint(0, flat.numel(), (k,), device="cuda", generator=gen)
        if case == "nan":
            flat[idx] = float("nan")
        elif case == "inf":
            flat[idx[: k // 2]] = float("inf")
            flat[idx[k // 2:]] = float("-inf")
        else:
            flat.mul_(1e2 if v.dtype in (torch.float16, torch.bfloat16) else 1e4)
        out.append(flat.view(v.shape))
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--budget-s", type=float, default=90)
    ap.add_argument("--out", default=".")
    args = ap.parse_args()
    started = time.time()
    suite.draw = gpu_draw
    default_config, default_cluster = kernels.row_config, kernels.cluster_for
    results = []
    for name, variants in VARIANTS.items():
        source = (REPO / "bench" / "tasks" / f"{name}.py").read_text()
        task = Task(name=name, source=source)
        traced = trace_task(source)
        plan = make_plan(task, traced.graph)
        ref_mod = suite.load(source, "ref_" + name)
        fns = {}
        cands = {}
        for cfg in [None] + variants:
            if time.time() - started > args.budget_s:
                break
            label = "default" if cfg is None else (f"{cfg.threads}/{cfg.block}{'/stream' if cfg.streamed else ''}"
                                                  f"{'/prefetch' if cfg.prefetch else ''}")
            row = {"task": name, "config": label}
            try:
                kernels.row_config = default_config if cfg is None else (lambda *a, _c=cfg: _c)
                kernels.cluster_for = default_cluster if cfg is None else (lambda *a, **k: None)
                cand = TemplateCoder().generate(task, plan)
                kernels.row_config, kernels.cluster_for = default_config, default_cluster
                row["note"] = cand.notes[0] if cand.notes else ""
                cand_mod = suite.load(cand.module_source, f"cand_{name}_{len(cands)}")
                with torch.no_grad():
                    ref, model = suite.build(ref_mod, cand_mod)
                    worst, ok = 0.0, True
                    checks = []
                    for seed in (1, 2):
                        x = suite.draw(ref_mod, seed)
                        good, err = suite.compare(model(*x), ref(*x), None)
                        ok, worst = ok and good, max(worst, err)
                    for case in ("nan", "inf", "large"):
                        x = plant(suite.draw(ref_mod, 7), case, 7)
                        good, err = suite.compare(model(*x), ref(*x), None)
                        checks.append(f"{case}:{'ok' if good else 'BAD %.3g' % err}")
                        ok = ok and good
                row.update(correct=ok, err_ratio=round(worst, 4), adversarial=" ".join(checks))
                x = suite.draw(ref_mod, 5)
                cands[label] = (model, x)
                fns[label] = (lambda m=model, xx=x: m(*xx))
            except Exception as exc:  # noqa: BLE001
                kernels.row_config, kernels.cluster_for = default_config, default_cluster
                row["error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
            results.append(row)
        if fns:
            with torch.no_grad():
                ref, _ = suite.build(ref_mod, suite.load(TemplateCoder().generate(task, plan).module_source, "c0_" + name))
                x = suite.draw(ref_mod, 5)
                fns["eager"] = lambda: ref(*x)
                times = suite.timed(fns, rounds=7)
            for row in results:
                if row["task"] == name and row["config"] in times:
                    row["ms"] = round(times[row["config"]], 4)
                    row["gbs"] = round(plan.bytes_moved / (times[row["config"]] * 1e-3) / 1e9, 1)
                    row["eager_ms"] = round(times["eager"], 4)
        for row in results:
            if row["task"] == name:
                print(json.dumps(row), flush=True)
        cands.clear()
        torch.cuda.empty_cache()
    Path(args.out, "row_sweep.json").write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
