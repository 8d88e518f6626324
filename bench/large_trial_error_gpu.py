"""Errors against float64 on the adversarial-large trial, for candidates made by
``bench/kernelbench_gpu_check.py generate`` (GPU).

For each candidate: the reference and the candidate built as the Verifier builds them (same init
seed, weights copied by name), inputs drawn for a seed and scaled as the Verifier's "large" case,
then eager (float32), the candidate and the reference in float64 on the same inputs. Prints, per
output, the largest |error| against float64 of eager and of the candidate, their difference, and
how many values break the Verifier's float64 rule (|cand - f64| > tolerance + 2 x |eager - f64|),
with the worst of them; then the same for an ordinary (unscaled) seed.

    STITCH_GEMM=triton PYTHONPATH=. python bench/kernelbench_gpu_check.py generate kb/level2 cands --only 94_
    PYTHONPATH=. python bench/large_trial_error_gpu.py cands --only L2_94_ --json $OUT/large_trial.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def study(out_dir: Path, name: str, seed: int) -> dict:
    import torch

    from stitch_lsp.worker.verify import accuracy as acc
    from stitch_lsp.worker import inputs as inp
    from stitch_lsp.worker.verify.compare import tolerance

    sys.path.insert(0, str(REPO / "bench"))
    from kernelbench_gpu_check import _module

    ref = _module(out_dir / f"{name}.ref.py", "stitch_reference")
    cand = _module(out_dir / f"{name}.py", "stitch_candidate")
    device = torch.device("cuda")
    inp.seed_everything(1234)
    model = ref.Model(*ref.get_init_inputs()).to(device).eval()
    inp.seed_everything(1234)
    new = cand.ModelNew(*ref.get_init_inputs()).to(device).eval()
    new.load_state_dict(model.state_dict(), strict=False)
    rows = {}
    for case in ("large", ""):
        def make():
            values = inp.draw(ref, seed, device)
            return inp.adversarial(values, case, seed) if case else values
        with torch.no_grad():
            eager = model(*make()).double()
            got = new(*make()).double()
            f64, why = acc.float64_outputs(model, make, torch.cuda.synchronize)
        if f64 is None:
            rows[case or "random"] = {"error": why}
            continue
        rtol, atol = tolerance(torch.float32)
        e_err, c_err = (eager - f64).abs(), (got - f64).abs()
        limit = atol + rtol * f64.abs() + 2.0 * e_err
        bad = c_err > limit
        worst = int(torch.argmax(c_err - limit))
        flat = lambda t: t.reshape(-1)  # noqa: E731
        rows[case or "random"] = {
            "eager_max_abs": float(e_err.max()), "candidate_max_abs": float(c_err.max()),
            "candidate_vs_eager_max_abs": float((got - eager).abs().max()),
            "eager_mean_abs": float(e_err.mean()), "candidate_mean_abs": float(c_err.mean()),
            "breaking_rule": int(bad.sum()), "values": int(bad.numel()),
            "worst": {"index": worst, "f64": float(flat(f64)[worst]), "eager": float(flat(eager)[worst]),
                      "candidate": float(flat(got)[worst]), "limit": float(flat(limit)[worst])},
        }
    return {"task": name, "seed": seed, **rows}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("cands", type=Path)
    ap.add_argument("--only", action="append", default=[])
    ap.add_argument("--seeds", type=int, nargs="*", default=[7, 11, 12345])
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    manifest = json.loads((args.cands / "manifest.json").read_text())
    results = []
    for name in manifest:
        if args.only and not any(name.startswith(o) for o in args.only):
            continue
        for seed in args.seeds:
            row = study(args.cands, name, seed)
            results.append(row)
            print(json.dumps(row), flush=True)
    if args.json:
        import torch
        args.json.write_text(json.dumps({"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
                                         "cuda": torch.version.cuda, "rows": results}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
