"""Save → verdict for a paired handwritten kernel, warm: the job the language server runs on each save.

A workspace with ``gelu.cu`` paired with ``ref/gelu_ref.py`` (4096 x 4096 fp32, the fixture of
tests/jobs/test_kernel_checks_e2e.py). One ``KernelChecker`` (as the server holds one per
workspace): the first save starts the worker and compiles the torch.compile baseline; each
re-save after it is a no-op edit (a comment changes, so the result cache has no answer and the
kernel is verified again in the warm worker: NVRTC, 11 correctness checks, the stream check,
the accuracy run, and the interleaved timing until its intervals converge). The LSP transport
around the job costs milliseconds (bench/lsp_latency.py) and is not included.

    python bench/resave_latency.py [--saves 8] [--out bench/results/resave_latency_h200.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from stitch_lsp.analysis.cuda_analysis import analyze_cuda  # noqa: E402
from stitch_lsp.cancellation import CancelToken  # noqa: E402
from stitch_lsp.jobs.kernel_check import CheckRequest, KernelChecker  # noqa: E402
from stitch_lsp.jobs.pairing import pair_kernels  # noqa: E402
from stitch_lsp.reports.kernel_card import speed_label  # noqa: E402
from stitch_lsp.settings import Settings  # noqa: E402
from tests.jobs.test_kernel_checks_e2e import CU, workspace  # noqa: E402


def request(root: Path, text: str) -> CheckRequest:
    path = root / "gelu.cu"
    path.write_text(text)
    kernels = [k for k in analyze_cuda(text, str(path)).kernels if k.body_range is not None]
    [pairing] = pair_kernels(path, text.splitlines(), kernels, root=root, pyproject_pairs=[]).pairs
    return CheckRequest(pairing=pairing, cu_source=text)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--saves", type=int, default=8)
    parser.add_argument("--out", default="")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        workspace(root)
        (root / "pyproject.toml").write_text("")
        checker = KernelChecker(root, Settings(trusted=True))
        try:
            for k in range(args.saves + 2):
                text = CU if k == 0 else CU + f"// save {k}\n"
                if k == args.saves + 1:
                    text = CU + f"// save {k - 1}\n"  # the same content again: the result cache answers
                start = time.perf_counter()
                result = checker.run(request(root, text), CancelToken(), lambda e: None)
                seconds = time.perf_counter() - start
                v = result.verdict
                t = v.timing
                rows.append({"save": k, "kind": "first" if k == 0 else "cached" if result.cached else "re-save",
                             "seconds": round(seconds, 3), "status": v.status.value, "speed": speed_label(v),
                             "rounds": t.rounds, "converged": t.converged, "timing_stop": t.method.split("; ")[2]
                             if t.method.count("; ") >= 2 else "", "compile_reused": t.compile_reused})
                print(f"{rows[-1]['kind']:8} {seconds:7.3f} s  {v.status.value}  {rows[-1]['speed']}  "
                      f"rounds {t.rounds} converged {t.converged}", flush=True)
        finally:
            checker.close()
    warm = [r["seconds"] for r in rows if r["kind"] == "re-save"]
    summary = {"first_save_s": rows[0]["seconds"], "warm_resave_median_s": statistics.median(warm),
               "warm_resave_max_s": max(warm), "cached_s": rows[-1]["seconds"], "goal_s": 2.0,
               "met": max(warm) <= 2.0}
    print(json.dumps(summary))
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps({"rows": rows, "summary": summary}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
