"""Request -> first verdict (compile + correctness + timing) for an elementwise candidate.

    python bench/verify_latency.py [--out bench/results/verify_latency.json]

Rows: a cold worker (process start, torch import, CUDA context, NVRTC compile, an
empty kernel cache), a warm worker (new kernel source: NVRTC compile, cached
torch.compile baseline), a warm worker with the kernel on disk, the verdict cache
(the same question again), and the same kernel through load_inline in a warm worker.
Goals: warm < 3 s, cached < 100 ms.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from stitch_lsp.pipeline import Candidate  # noqa: E402
from stitch_lsp.serde import to_dict  # noqa: E402
from stitch_lsp.settings import Settings  # noqa: E402
from stitch_lsp.verify.service import Verifier, VerifyOptions  # noqa: E402

CORPUS = REPO / "tests" / "verify" / "corpus" / "gpu"


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default="")
    parser.add_argument("--skip-load-inline", action="store_true")
    args = parser.parse_args()
    reference = (CORPUS / "ref_relu_scale.py").read_text()
    honest = (CORPUS / "honest_relu_scale.py").read_text()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["STITCH_KERNEL_CACHE"] = str(Path(tmp) / "kernels")

        def measure(label: str, verifier: Verifier, source: str, **opts) -> None:
            opts.setdefault("use_cache", False)
            start = time.perf_counter()
            v = verifier.verify(reference, Candidate(module_source=source), VerifyOptions(**opts))
            seconds = time.perf_counter() - start
            row = {"case": label, "seconds": round(seconds, 4), "status": v.status.value,
                   "compile_s": round(v.compile.seconds, 4) if v.compile else None,
                   "compile_cached": v.compile.cached if v.compile else None,
                   "speedup_vs_eager": v.timing.speedup_vs_eager,
                   "speedup_vs_compile": v.timing.speedup_vs_compile,
                   "timing_samples": v.timing.candidate.samples if v.timing.candidate else 0}
            rows.append(row)
            if args.out:  # written as it goes: a run cut short still leaves its rows
                Path(args.out).write_text(json.dumps({"rows": rows, "partial": True}, indent=2))
            print(f"{label:<48} {seconds:8.3f} s  {v.status.value}  {v.summary[:90]}", flush=True)

        verifier = Verifier(Settings(), Path(tmp) / "work")
        measure("cold worker, new kernel (torch.compile on)", verifier, honest)
        measure("warm worker, new kernel source", verifier, honest.replace("2.f * v", "v * 2.f"))
        measure("warm worker, kernel cached on disk", verifier, honest)
        measure("warm worker, no torch.compile baseline", verifier, honest.replace("2.f * v", "v + v"),
                compile_baseline=False)
        measure("verdict cache (same question again)", verifier, honest, use_cache=True)
        measure("verdict cache (same question again)", verifier, honest, use_cache=True)
        verifier.close()
        cold2 = Verifier(Settings(), Path(tmp) / "work2")
        measure("cold worker, kernel cached on disk", cold2, honest)
        if not args.skip_load_inline:
            measure("warm worker, same kernel via load_inline", cold2, (CORPUS / "honest_load_inline.py").read_text(),
                    timeout_s=280)
        device = cold2.device_info()
        cold2.close()
    result = {"rows": rows, "device": to_dict(device) if device else None, "python": platform.python_version(),
              "command": "python bench/verify_latency.py", "goals": {"warm_s": 3.0, "cached_s": 0.1}}
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
