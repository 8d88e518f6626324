"""A one-shot program for ncu and compute-sanitizer: build the models and run one forward.

    python -m stitch_lsp.worker.run_target JOB.json --role candidate|reference [--small] --result OUT.json

The profiled forward runs inside an NVTX range named ``stitch_<role>`` after one
warm-up call (compiles, lazy initialisation), so ``ncu --nvtx --nvtx-include
stitch_candidate/`` sees only the steady-state kernels.
"""

from __future__ import annotations

import argparse
import json
import sys
import traceback
from pathlib import Path

import torch

from stitch_lsp.serde import from_json
from stitch_lsp.contract.verify import VerifyJob
from stitch_lsp.worker import inputs as inp
from stitch_lsp.worker.modules import import_file

SMALL_LIMIT = 1024


def small_sizes(ref, source: str) -> dict[str, int]:
    sizes = inp.size_globals(ref, source)
    return {k: (v if v <= SMALL_LIMIT else SMALL_LIMIT - 1) for k, v in sizes.items() if v > SMALL_LIMIT}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("job")
    parser.add_argument("--role", choices=["candidate", "reference"], default="candidate")
    parser.add_argument("--small", action="store_true")
    parser.add_argument("--result", default="")
    args = parser.parse_args(argv)
    result: dict = {"ok": False, "note": ""}
    try:
        job = from_json(Path(args.job).read_text(), VerifyJob)
        device = torch.device("cuda", job.options.gpu_index)
        torch.cuda.set_device(device)
        ref = import_file(Path(job.reference_path), "reference")
        if not hasattr(ref, "get_init_inputs"):
            ref.get_init_inputs = lambda: []
        if args.small:
            source = Path(job.reference_path).read_text()
            change = small_sizes(ref, source)
            if change:
                restore = inp.with_globals(ref, change, source)
                try:
                    inp.seed_everything(1234)
                    ref.Model(*ref.get_init_inputs())
                    inp.draw(ref, 4321, torch.device("cpu"))
                    result["note"] = "small shape: " + ", ".join(f"{k}={v}" for k, v in change.items())
                except Exception:
                    restore()
                    result["note"] = "the full shape (the reference rejects a smaller one)"
        inp.seed_everything(1234)
        init = list(ref.get_init_inputs())
        if args.role == "candidate":
            cand = import_file(Path(job.candidate_path), "candidate")
            inp.seed_everything(1234)
            model = cand.ModelNew(*init)
        else:
            model = ref.Model(*init)
        if isinstance(model, torch.nn.Module):
            model = model.to(device).eval()
        values = inp.draw(ref, 4321, device)
        with torch.no_grad():
            model(*inp.clone(values))  # warm-up: compiles and lazy set-up stay out of the range
            torch.cuda.synchronize()
            torch.cuda.nvtx.range_push(f"stitch_{args.role}")
            model(*inp.clone(values))
            torch.cuda.synchronize()
            torch.cuda.nvtx.range_pop()
        result["ok"] = True
    except BaseException as exc:  # noqa: BLE001 - reported to the parent as data
        result["error"] = f"{type(exc).__name__}: {exc}"
        result["traceback"] = traceback.format_exc()[-3000:]
    if args.result:
        Path(args.result).write_text(json.dumps(result))
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
