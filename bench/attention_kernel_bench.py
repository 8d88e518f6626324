"""GPU time of the attention kernel of our own beside PyTorch's fused attention and ``torch.compile``'s.

    python bench/attention_kernel_bench.py [--out DIR] [--budget 4]

For each size (a GPT block's in an editor, then longer sequences), in fp32 and bf16, three contenders run
interleaved as the Verifier times them (launches queued behind a blocking kernel, L2 flushed before each call,
``worker.timing.run_interleaved``): ``sdpa`` (``F.scaled_dot_product_attention``, the backend PyTorch picks),
``compile`` (``torch.compile`` of attention written out: scores GEMM, causal mask, softmax, second GEMM, as
minGPT writes it) and ``ours``. Writes ``attention_kernel.json`` and ``attention_kernel.md`` (median GPU
microseconds and the ratios with their 95% intervals). Needs a CUDA GPU.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SIZES = [(2, 4, 256, 64), (4, 12, 256, 64), (8, 12, 1024, 64), (2, 16, 2048, 128)]


def timing_row(run, bases: tuple[str, ...], ours: str) -> dict:
    """Each contender's median GPU µs, and ``ours`` against each base: the median ratio and its 95% interval."""
    from stitch_lsp.contract.intervals import median_interval, round_ratios

    row = {}
    for name, s in run.samples.items():
        row[f"{name}_us"] = 1e3 * sorted(s.round_gpu_ms)[len(s.round_gpu_ms) // 2]
    for base in bases:
        ratios = round_ratios(run.samples[base].round_gpu_ms, run.samples[ours].round_gpu_ms)
        iv = median_interval(ratios)
        row[f"{ours}_vs_{base}" if ours != "ours" else f"vs_{base}"] = sorted(ratios)[len(ratios) // 2]
        row[(f"{ours}_vs_{base}" if ours != "ours" else f"vs_{base}") + "_ci"] = [iv.low, iv.high] if iv else None
    return row


def main() -> None:
    import torch
    import torch.nn.functional as F

    from stitch_lsp.runtime.loader import load_kernel
    from stitch_lsp.worker.timing import run_interleaved
    from stitch_lsp.coders.template.attention.kernel import attention_kernel
    from tests.agents.test_attention_kernel import sdpa_graph

    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=".")
    ap.add_argument("--budget", type=float, default=4.0)
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)

    def written(q, k, v):
        s = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        t = q.size(-2)
        s = s.masked_fill(torch.ones(t, t, device=q.device, dtype=torch.bool).tril().logical_not(), float("-inf"))
        return F.softmax(s, dim=-1) @ v

    compiled = torch.compile(written)
    rows = []
    for dtype in ("float32", "bfloat16"):
        for b, h, t, d in SIZES:
            graph = sdpa_graph(b=b, h=h, tq=t, d=d, dtype=dtype)
            spec = attention_kernel(graph.nodes[0], graph.index(), "stitch_attention_bench", written=True)
            kernel = load_kernel(spec.source, spec.name)
            shape = (b, h, t, d)
            sets = [[torch.randn(shape, device="cuda", dtype=getattr(torch, dtype)) for _ in range(3)]
                    for _ in range(2)]

            def ours(x, spec=spec, kernel=kernel, shape=shape):
                o = torch.empty(shape, device="cuda", dtype=x[0].dtype)
                kernel.launch_pointers((spec.grid, 1, 1), (spec.block, 1, 1),
                                       [x[0].data_ptr(), x[1].data_ptr(), x[2].data_ptr(), o.data_ptr()], spec.shared)
                return o

            contenders = {"sdpa": lambda x: F.scaled_dot_product_attention(*x, is_causal=True),
                          "compile": lambda x: compiled(*x), "ours": ours}
            want = F.scaled_dot_product_attention(*[s.double() for s in sets[0]], is_causal=True)
            err = (ours(sets[0]).double() - want).abs().max().item()
            run = run_interleaved(contenders, sets, cuda=True, budget_s=a.budget,
                                  pairs=[("sdpa", "ours"), ("compile", "ours")])
            row = {"dtype": dtype, "shape": list(shape), "causal": True, "ours_note": spec.note, "max_abs_err": err,
                   "rounds": run.rounds}
            row.update(timing_row(run, ("sdpa", "compile"), "ours"))
            rows.append(row)
            print(json.dumps(row), flush=True)
    (out / "attention_kernel.json").write_text(json.dumps({"device": torch.cuda.get_device_name(),
                                                          "torch": torch.__version__, "cuda": torch.version.cuda,
                                                          "rows": rows}, indent=1))
    lines = ["| dtype | (B, H, T, D) causal | sdpa µs | compile µs | ours µs | ours vs sdpa | ours vs compile | max err |",
             "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in rows:
        ci = lambda k: f" [{r[k][0]:.2f}, {r[k][1]:.2f}]" if r.get(k) else ""  # noqa: E731
        lines.append(f"| {r['dtype']} | {tuple(r['shape'])} | {r['sdpa_us']:.1f} | {r['compile_us']:.1f} | "
                     f"{r['ours_us']:.1f} | {r['vs_sdpa']:.2f}x{ci('vs_sdpa_ci')} | {r['vs_compile']:.2f}x"
                     f"{ci('vs_compile_ci')} | {r['max_abs_err']:.2e} |")
    (out / "attention_kernel.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
