"""``stitch verify-kernel FILE.cu[:KERNEL] ...``: check paired handwritten kernels, headless.

The same pairing (``// stitch: reference=...`` or ``[[tool.stitch.pair]]``), the
same generated binding, Verifier and result cache as saving the file in the
editor; for CI and terminals. Exit 0 when every checked kernel is correct, 1 when
one is not, 2 for bad input (a pairing problem, no paired kernel), 3 without a GPU.
"""

from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path

from stitch_lsp.cancellation import Cancelled, CancelToken, ProgressEvent
from stitch_lsp.findings import Severity
from stitch_lsp.serde import to_dict
from stitch_lsp.commands.workspace_settings import add_trust_flag, load
from stitch_lsp.verdict import VerdictStatus

EXIT_CORRECT = 0
EXIT_NOT_CORRECT = 1
EXIT_USAGE = 2
EXIT_NO_GPU = 3


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "verify-kernel",
        help="check handwritten kernels paired with a reference (// stitch: reference=...)",
        description="Verify the paired kernels of .cu files against their references: correctness, timing against "
                    "eager PyTorch and torch.compile, optionally Nsight Compute and compute-sanitizer. Results come "
                    "from the workspace's result cache (.stitch/cache) when the same question was answered before.",
    )
    p.add_argument("targets", nargs="+", metavar="FILE.cu[:KERNEL]", help="a .cu file, optionally one kernel in it")
    p.add_argument("--profile", action="store_true", help="also profile with Nsight Compute (ncu)")
    p.add_argument("--sanitize", action="store_true", help="also run compute-sanitizer memcheck and racecheck")
    p.add_argument("--json", action="store_true", help="print the verdicts as JSON")
    p.add_argument("--report", action="store_true", help="also write each verdict to .stitch/reports/<kernel>-<time>.md")
    p.add_argument("--no-cache", action="store_true", help="verify again even when the cache has the answer")
    p.add_argument("--workspace", default="", help="workspace root (default: the nearest folder with pyproject.toml or .git)")
    p.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    add_trust_flag(p)
    p.set_defaults(func=run)


def _shown(path: Path) -> str:
    """The path as a user would type it: relative to the current folder when inside it."""
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def find_root(start: Path) -> Path:
    for folder in (start, *start.parents):
        if (folder / "pyproject.toml").is_file() or (folder / ".git").exists():
            return folder
    return start


def run(args: argparse.Namespace) -> int:
    from stitch_lsp.analysis.cuda_analysis import analyze_cuda
    from stitch_lsp.jobs.kernel_check import CheckRequest, KernelChecker
    from stitch_lsp.jobs.pairing import pair_kernels
    from stitch_lsp.reports.kernel_card import badge, speed_label
    from stitch_lsp.reports.ratios import cache_note
    from stitch_lsp.reports.verdict_report import report_path, verdict_report

    targets: list[tuple[Path, str]] = []
    for raw in args.targets:
        path_text, _, kernel = raw.partition(":") if not Path(raw).exists() else (raw, "", "")
        path = Path(path_text).resolve()
        if not path.is_file():
            print(f"stitch verify-kernel: {path_text} does not exist", file=sys.stderr)
            return EXIT_USAGE
        targets.append((path, kernel))
    root = Path(args.workspace).resolve() if args.workspace else find_root(targets[0][0].parent)
    settings = load(root, args, "verify-kernel")
    checker = KernelChecker(root, settings)
    token = CancelToken()
    previous = signal.signal(signal.SIGINT, lambda *_: token.cancel("interrupted"))

    def progress(event: ProgressEvent) -> None:
        if not args.quiet and not args.json:
            pct = f"{event.percent:3d}% " if event.percent is not None else ""
            print(f"  [{event.stage}] {pct}{event.message}", file=sys.stderr)

    results = []
    status = EXIT_CORRECT
    try:
        for path, only in targets:
            text = path.read_text(errors="replace")
            analysis = analyze_cuda(text, str(path))
            kernels = [k for k in analysis.kernels if k.body_range is not None]
            paired = pair_kernels(path, text.splitlines(), kernels, root=root, pyproject_pairs=settings.pair)
            for f in paired.findings:
                level = "error" if f.severity is Severity.ERROR else "warning"
                print(f"{_shown(path)}:{f.range.start.line + 1}:{f.range.start.character + 1}: {level}: {f.message}",
                      file=sys.stderr)
            pairs = [p for p in paired.pairs if not only or p.kernel == only]
            if not pairs:
                what = f"`{only}` is not a paired kernel" if only else "no paired kernel"
                print(f"stitch verify-kernel: {path.name}: {what} (add `// stitch: reference=path/to/ref.py` above it)",
                      file=sys.stderr)
                status = max(status, EXIT_USAGE)
                continue
            for pairing in pairs:
                request = CheckRequest(pairing=pairing, cu_source=text, profile=args.profile, sanitize=args.sanitize)
                result = checker.run(request, token, progress, use_cache=not args.no_cache)
                v = result.verdict
                if args.report:
                    out = report_path(root, pairing.kernel)
                    out.parent.mkdir(parents=True, exist_ok=True)
                    out.write_text(verdict_report(pairing.kernel, v, source=str(path), reference=pairing.reference.path))
                results.append({"file": str(path), "kernel": pairing.kernel, "cached": result.cached,
                                "measured_at": v.measured_at, "verdict": to_dict(v)})
                if not args.json:
                    speed = speed_label(v)
                    cached = f" {cache_note(v, result.cached)}" if result.cached else ""
                    print(f"{path.name}:{pairing.kernel_range.start.line + 1}: {pairing.kernel}: {badge(v)}"
                          f"{' · ' + speed if speed else ''}{cached}")
                    if v.summary:
                        print(f"  {v.summary}")
                if v.status is VerdictStatus.NO_GPU:
                    status = max(status, EXIT_NO_GPU)
                elif not v.offerable:
                    status = max(status, EXIT_NOT_CORRECT)
    except Cancelled:
        print("stitch verify-kernel: interrupted", file=sys.stderr)
        return 130
    finally:
        signal.signal(signal.SIGINT, previous)
        checker.close()
    if args.json:
        import json

        print(json.dumps(results, indent=2))
    return status
