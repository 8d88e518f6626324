"""``stitch verify REFERENCE.py CANDIDATE.py``: check a kernel against its reference."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from stitch_lsp.cancellation import CancelToken, ProgressEvent
from stitch_lsp.pipeline import Candidate
from stitch_lsp.task.precision import DEFAULT as DEFAULT_PRECISION, PRECISIONS, cast_source
from stitch_lsp.serde import to_json
from stitch_lsp.commands.workspace_settings import tell
from stitch_lsp.settings import Settings, with_overrides
from stitch_lsp.verdict import Verdict, VerdictStatus

EXIT_CORRECT = 0
EXIT_NOT_CORRECT = 1
EXIT_USAGE = 2
EXIT_NO_GPU = 3


from stitch_lsp.contract.verify import COMPILE_MODES


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("verify", help="check a candidate (ModelNew) against a KernelBench reference (Model)",
                       description="Compile, check (trials, adversarial values, a second shape, anti-hacking) and "
                                   "time CANDIDATE against REFERENCE. Exit 0 only if the candidate is correct.")
    p.add_argument("reference", help="KernelBench-format reference: Model, get_inputs, get_init_inputs")
    p.add_argument("candidate", help="Python file defining ModelNew; .cu/.cuh files next to it travel with it")
    p.add_argument("--json", action="store_true", help="print the verdict as JSON")
    p.add_argument("--profile", action="store_true", help="also profile with Nsight Compute (ncu)")
    p.add_argument("--sanitize", action="store_true", help="also run compute-sanitizer memcheck and racecheck")
    p.add_argument("--trials", type=int, default=5, help="random trials (at least 5)")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds before the worker is killed")
    p.add_argument("--no-timing", action="store_true", help="skip timing")
    p.add_argument("--no-compile-baseline", action="store_true", help="leave torch.compile out of the timing")
    p.add_argument("--compile-mode", choices=COMPILE_MODES, default="default",
                   help="torch.compile's mode for the timing baseline (default: default)")
    p.add_argument("--no-cache", action="store_true",
                   help="measure again: no verdict cache, no compiled baseline reused from an earlier job")
    p.add_argument("--timing-budget", type=float, default=1.0, metavar="SECONDS",
                   help="time cap of the timing rounds; they stop sooner once every ratio's 95%% interval is "
                        "within ±1.5%% (default 1)")
    p.add_argument("--device", choices=["cuda", "cpu"], default="cuda",
                   help="cpu: a test mode for pure-PyTorch candidates without a GPU (no CUDA kernel runs)")
    p.add_argument("--gpu", type=int, default=0, help="GPU index")
    p.add_argument("--memory-limit", type=float, default=None, metavar="GIB",
                   help="at most this much GPU memory for the checks (default: what is free); a task that cannot "
                        "fit ends TOO_LARGE before anything runs")
    p.add_argument("--precision", choices=tuple(PRECISIONS), default=DEFAULT_PRECISION,
                   help="run both models in this precision, as KernelBench's harness does: their floating "
                        "parameters and buffers and the floating inputs cast (default fp32: as written)")
    p.add_argument("--workdir", default="", help="where job files go (default: .stitch/verify in the current folder)")
    p.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    p.set_defaults(func=run)


def read_candidate(path: Path) -> Candidate:
    cuda = {}
    for pattern in ("*.cu", "*.cuh"):
        for f in sorted(path.parent.glob(pattern)):
            cuda[f.name] = f.read_text(errors="replace")
    return Candidate(module_source=path.read_text(errors="replace"), cuda_sources=cuda, coder="user")


def run(args: argparse.Namespace) -> int:
    from stitch_lsp.verify.format import format_verdict
    from stitch_lsp.verify.service import Verifier, VerifyOptions

    ref_path, cand_path = Path(args.reference), Path(args.candidate)
    for label, path in (("reference", ref_path), ("candidate", cand_path)):
        if not path.is_file():
            print(f"stitch verify: the {label} {path} does not exist", file=sys.stderr)
            return EXIT_USAGE
    try:
        reference = cast_source(ref_path.read_text(), args.precision)
        candidate = read_candidate(cand_path)
    except (OSError, UnicodeDecodeError) as exc:
        print(f"stitch verify: cannot read the input: {exc}", file=sys.stderr)
        return EXIT_USAGE
    checked = with_overrides(Settings(), {"verify_timeout_s": args.timeout, "gpu_index": args.gpu})
    tell(checked, "verify")
    args.timeout, args.gpu = checked.settings.verify_timeout_s, checked.settings.gpu_index
    options = VerifyOptions(trials=args.trials, timing=not args.no_timing, profile=args.profile,
                            sanitize=args.sanitize, timeout_s=args.timeout, gpu_index=args.gpu,
                            compile_baseline=not args.no_compile_baseline, device=args.device,
                            memory_limit_gib=args.memory_limit, compile_mode=args.compile_mode,
                            use_cache=not args.no_cache, timing_budget_s=args.timing_budget,
                            precision=args.precision)
    workdir = Path(args.workdir) if args.workdir else Path.cwd() / ".stitch" / "verify"
    settings = Settings(gpu_index=args.gpu)
    verifier = Verifier(settings, workdir)
    token = CancelToken()

    def report(event: ProgressEvent) -> None:
        if not args.quiet and not args.json:
            pct = f"{event.percent:3d}% " if event.percent is not None else ""
            print(f"  [{event.stage}] {pct}{event.message}", file=sys.stderr)

    try:
        verdict: Verdict = verifier.verify(reference, candidate, options, cancel=token, report=report)
    except KeyboardInterrupt:
        token.cancel("interrupted")
        verifier.close()
        print("stitch verify: interrupted", file=sys.stderr)
        return 130
    finally:
        verifier.close()
    if args.json:
        print(to_json(verdict, indent=2))
    else:
        print(format_verdict(verdict, str(cand_path)))
    if verdict.status is VerdictStatus.NO_GPU:
        return EXIT_NO_GPU
    return EXIT_CORRECT if verdict.offerable else EXIT_NOT_CORRECT
