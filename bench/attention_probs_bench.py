"""GPU time of attention's probabilities as one kernel of our own (one pass and two passes) beside eager and
``torch.compile`` of the written code (scores GEMM, scale, causal mask, softmax).

    python bench/attention_probs_bench.py [--out DIR] [--budget 3]

q and k are heads split from one (B, T, 3, H, D) projection and transposed, as nanoGPT has them, so the kernel
reads them in place and eager / ``torch.compile`` copy them for the GEMM. The contenders run interleaved as the
Verifier times them (``worker.timing.run_interleaved``). Writes ``attention_probs.json`` and
``attention_probs.md`` (median GPU µs; each kernel against eager and ``torch.compile`` with 95% intervals; the
max error against float64). Needs a CUDA GPU.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

SIZES = [(2, 4, 256, 64), (4, 12, 256, 64), (8, 12, 512, 64), (2, 4, 256, 128), (2, 16, 1024, 64)]


def main() -> None:
    import torch
    import torch.nn.functional as F

    from attention_kernel_bench import timing_row
    from stitch_lsp.coders.template.attention import probs_kernel as pk
    from attrs import evolve
    from stitch_lsp.runtime.loader import load_kernel
    from stitch_lsp.worker.timing import run_interleaved
    from tests.agents.test_attention_kernel import probs_graph

    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=".")
    ap.add_argument("--budget", type=float, default=3.0)
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)

    def written(q, k):
        s = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        t = q.size(-2)
        s = s.masked_fill(torch.ones(t, t, device=q.device, dtype=torch.bool).tril().logical_not(), float("-inf"))
        return F.softmax(s, dim=-1)

    compiled = torch.compile(written)
    rows = []
    for dtype in ("float32", "bfloat16"):
        for b, h, t, d in SIZES:
            strides = (t * 3 * h * d, d, 3 * h * d, 1)
            graph = probs_graph(b=b, h=h, tq=t, d=d, dtype=dtype, scale=1.0 / math.sqrt(d))
            graph = evolve(graph, inputs=[evolve(i, strides=strides) for i in graph.inputs])
            kernels = {}
            most = pk.ONE_PASS_SCORES
            for name, scores in (("one_pass", most), ("two_pass", 0)):
                pk.ONE_PASS_SCORES = scores  # 0: no row's scores fit, so the two-pass kernel is written
                spec = pk.probs_kernel(graph.nodes[0], graph.index(), f"stitch_attention_probs_{name}", graph)
                pk.ONE_PASS_SCORES = most
                if name == "one_pass" and "one pass" not in spec.note:
                    continue  # too many keys to hold: only the two-pass kernel runs at this size
                kernels[name] = (spec, load_kernel(spec.source, spec.name))

            def draw():
                qkv = torch.randn(b, t, 3, h, d, device="cuda", dtype=getattr(torch, dtype))
                return [qkv[:, :, 0].transpose(1, 2), qkv[:, :, 1].transpose(1, 2)]

            sets = [draw() for _ in range(2)]

            def launcher(spec, kernel):
                def run(x):
                    o = torch.empty((b, h, t, t), device="cuda", dtype=x[0].dtype)
                    kernel.launch_pointers((spec.grid, 1, 1), (spec.block, 1, 1),
                                           [x[0].data_ptr(), x[1].data_ptr(), o.data_ptr()], spec.shared)
                    return o
                return run

            contenders = {"eager": lambda x: written(*x), "compile": lambda x: compiled(*x)}
            contenders.update({name: launcher(*kernel) for name, kernel in kernels.items()})
            want = written(*[s.double() for s in sets[0]])
            row = {"dtype": dtype, "shape": [b, h, t, d], "notes": {n: k[0].note for n, k in kernels.items()}}
            for name in kernels:
                row[f"{name}_max_abs_err"] = (contenders[name](sets[0]).double() - want).abs().max().item()
            pairs = [(base, name) for name in kernels for base in ("eager", "compile")]
            run = run_interleaved(contenders, sets, cuda=True, budget_s=a.budget, pairs=pairs)
            row["rounds"] = run.rounds
            for name in kernels:
                row.update(timing_row(run, ("eager", "compile"), name))
            rows.append(row)
            print(json.dumps(row), flush=True)
    (out / "attention_probs.json").write_text(json.dumps({"device": torch.cuda.get_device_name(),
                                                         "torch": torch.__version__, "cuda": torch.version.cuda,
                                                         "rows": rows}, indent=1))
    lines = ["| dtype | (B, H, T, D) causal | eager µs | compile µs | kernel | µs | vs eager | vs compile | max err |",
             "| --- | --- | ---: | ---: | --- | ---: | ---: | ---: | ---: |"]
    for r in rows:
        for name in ("one_pass", "two_pass"):
            if f"{name}_us" not in r:
                continue
            ci = lambda k: f" [{r[k][0]:.2f}, {r[k][1]:.2f}]" if r.get(k) else ""  # noqa: E731
            lines.append(f"| {r['dtype']} | {tuple(r['shape'])} | {r['eager_us']:.1f} | {r['compile_us']:.1f} | {name} "
                         f"| {r[f'{name}_us']:.1f} | {r[f'{name}_vs_eager']:.2f}x{ci(f'{name}_vs_eager_ci')} | "
                         f"{r[f'{name}_vs_compile']:.2f}x{ci(f'{name}_vs_compile_ci')} | {r[f'{name}_max_abs_err']:.2e} |")
    (out / "attention_probs.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
