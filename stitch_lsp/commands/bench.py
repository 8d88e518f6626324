"""``stitch bench DIR``: the Coder and the Verifier over every KernelBench task in DIR.

Prints a row per task (correct or why not, speedup over eager and torch.compile,
bound and % of peak) and the suite summary (fast_p, geometric-mean speedup,
compile and correctness rates, % of the measured copy bandwidth). Results are
kept per task under the run directory, so Ctrl-C loses only the tasks running
and --resume picks up where it stopped. One worker per visible GPU, or with
--cluster one per GPU of a Ray cluster (docs/cluster.md).
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from stitch_lsp.benchsuite.shard import DEFAULT_BACKEND
from stitch_lsp.task.precision import DEFAULT as DEFAULT_PRECISION, PRECISIONS
from stitch_lsp.benchsuite.store import DEFAULT_BASE, latest_run, new_run_id
from stitch_lsp.benchsuite.suite import BenchError, BenchOptions, list_tasks, run_bench
from stitch_lsp.benchsuite.table import render
from stitch_lsp.benchsuite.tasks import TaskFileError, TaskFilter
from stitch_lsp.serde import to_json
from stitch_lsp.commands.workspace_settings import tell
from stitch_lsp.settings import Layer, Settings, from_pyproject, read_settings

CODERS = ("template", "llm", "auto")


def _csv(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def _levels(text: str) -> list[int]:
    try:
        return [int(part) for part in _csv(text)]
    except ValueError:
        raise argparse.ArgumentTypeError(f"levels are integers, e.g. 1,2 (got {text!r})") from None


def _part(text: str) -> tuple[int, int]:
    try:
        i, n = (int(part) for part in text.split("/"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"--part wants I/N, e.g. 1/2 (got {text!r})") from None
    if n < 1 or not 1 <= i <= n:
        raise argparse.ArgumentTypeError(f"--part {text}: want 1 <= I <= N")
    return i, n


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "bench",
        help="run the Coder and the Verifier over a directory of KernelBench tasks",
        description=__doc__.split("\n\n", 1)[1] if __doc__ else None,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("dir", type=Path, help="directory of task files (Model, get_inputs, get_init_inputs)")
    p.add_argument("--coder", choices=CODERS, default=None, help="which Coder writes the kernels (default: settings, else auto)")
    p.add_argument("--levels", type=_levels, default=[], metavar="N[,N]", help="only tasks of these levels")
    p.add_argument("--tags", type=_csv, default=[], metavar="TAG[,TAG]",
                   help="only tasks carrying all these tags (a name prefix such as norm, pw, gemm, red counts)")
    p.add_argument("--tasks", action="append", default=[], metavar="GLOB", help="only tasks whose name matches (repeatable)")
    p.add_argument("--part", type=_part, default=None, metavar="I/N",
                   help="run only the I-th of N interleaved slices of the selected tasks (split a suite over runs; "
                        "combine the reports with python -m stitch_lsp.benchsuite.merge)")
    p.add_argument("--out", type=Path, default=None, metavar="RUN_DIR",
                   help=f"run directory for per-task JSON, report.json, table.txt (default {DEFAULT_BASE}/<time>)")
    p.add_argument("--json", dest="json_out", default=None, metavar="OUT",
                   help="also write the whole report as JSON to OUT ('-' for stdout); a path without .json is "
                        "taken as the run directory")
    p.add_argument("--resume", action="store_true",
                   help="continue the run in --out (default: the latest under .stitch/bench), skipping finished tasks")
    p.add_argument("--rerun", type=_csv, default=[], metavar="STATUS[,STATUS]",
                   help="with --resume: run again the tasks that ended with these statuses (e.g. incorrect,crashed)")
    p.add_argument("--list", action="store_true", help="list the selected tasks and exit")
    p.add_argument("--gpus", type=int, default=None, metavar="N",
                   help="use at most N of the visible GPUs, or of the cluster's (default all)")
    p.add_argument("--cluster", nargs="?", const="", default=None, metavar="ADDRESS",
                   help="run the tasks on a Ray cluster's GPUs: ray://HOST:PORT, HOST:PORT, auto (a cluster "
                        "started on this machine), or no value for $RAY_ADDRESS; needs "
                        "pip install 'stitch-lsp[cluster]' (docs/cluster.md)")
    p.add_argument("--budget", type=float, default=None, metavar="SECONDS",
                   help="start no task after this long; the rest are reported as not run (resume later)")
    p.add_argument("--task-timeout", type=float, default=900.0, metavar="SECONDS",
                   help="kill a task that takes longer (default 900)")
    p.add_argument("--profile", choices=("all", "misses", "none"), default="all",
                   help="Nsight Compute on every candidate (all, default), only on correct ones short of a goal "
                        "(misses: < 1.5x eager, < 1.1x torch.compile or < 80%% of copy bandwidth), or none")
    p.add_argument("--no-profile", dest="profile", action="store_const", const="none", help="same as --profile none")
    p.add_argument("--sanitize", action="store_true", help="also run compute-sanitizer on every candidate")
    p.add_argument("--precision", choices=tuple(PRECISIONS), default=DEFAULT_PRECISION,
                   help="run every task in this precision, as KernelBench's harness does: the model's floating "
                        "parameters and buffers and the floating inputs cast (default fp32, the tasks as written)")
    p.add_argument("--no-bandwidth", action="store_true", help="skip measuring the copy bandwidth")
    p.add_argument("--repeat", type=int, default=1, metavar="N",
                   help="verify every task N times, each time in fresh processes with no cache; prints the median "
                        "and spread (max / min) of each task's speedups and writes RUN_DIR/repeat.json")
    p.add_argument("--no-cache", action="store_true",
                   help="measure every verdict again (no verdict cache, no reused torch.compile baseline)")
    p.add_argument("--compile-mode", choices=("default", "max-autotune-no-cudagraphs"), default=None,
                   help="torch.compile's mode for the timing baseline (default: settings, else default)")
    p.add_argument("--verbose", "-v", action="store_true", help="print each task's stages as they change")
    # The module that runs a task and measures a GPU inside each worker (tests plug in stand-ins).
    p.add_argument("--backend", default=DEFAULT_BACKEND, help=argparse.SUPPRESS)
    p.set_defaults(func=run)


def _run_dir(args) -> Path:
    if args.out is not None:
        return args.out
    if args.json_out and args.json_out != "-" and not args.json_out.endswith(".json"):
        return Path(args.json_out)
    if args.resume:
        latest = latest_run(DEFAULT_BASE)
        if latest is None:
            raise BenchError(f"--resume: no run under {DEFAULT_BASE} to resume; name one with --out")
        return latest
    return DEFAULT_BASE / new_run_id()


def run(args) -> int:
    # Benchmarking means running the task files and generated kernels: asking for it is the trust.
    built = read_settings([Layer("pyproject.toml", from_pyproject(Path.cwd()), True)], root=Path.cwd(), trusted=True)
    tell(built, "bench")
    settings = built.settings
    coder = args.coder or settings.coder or "auto"
    # Benchmarking means running the task files and generated kernels: asking for it is the trust.
    settings = settings.replace(trusted=True, gpu_index=0, coder=coder)
    if args.compile_mode:
        settings = settings.replace(compile_mode=args.compile_mode)
    if args.repeat < 1:
        print("stitch bench: --repeat wants N >= 1", file=sys.stderr)
        return 2
    try:
        options = BenchOptions(
            tasks_dir=args.dir,
            run_dir=_run_dir(args),
            coder=coder,
            filter=TaskFilter(levels=args.levels, tags=args.tags, globs=args.tasks),
            resume=args.resume,
            rerun=args.rerun,
            gpus=args.gpus,
            cluster=args.cluster,
            budget_s=args.budget,
            part=args.part,
            task_timeout_s=args.task_timeout,
            measure_bandwidth=not args.no_bandwidth,
            profile=args.profile,
            sanitize=args.sanitize,
            precision=args.precision,
            command="stitch " + " ".join(shlex.quote(a) for a in sys.argv[1:]),
            verbose=args.verbose,
            backend=args.backend,
            no_cache=args.no_cache,
        )
        if args.list:
            return 0 if list_tasks(options, sys.stdout) else 1
        if args.rerun and not args.resume:
            raise BenchError("--rerun goes with --resume (it picks which finished tasks of a run to run again)")
        if args.repeat > 1:
            if args.resume:
                raise BenchError("--repeat starts fresh runs; it does not go with --resume")
            return _repeat(args, options, settings)
        report = run_bench(options, settings, out=sys.stderr if args.json_out == "-" else sys.stdout)
    except (BenchError, TaskFileError) as exc:
        print(f"stitch bench: {exc}", file=sys.stderr)
        return 2
    text = render(report)
    if args.json_out == "-":
        print(to_json(report, indent=1))
        print(text, file=sys.stderr)
    else:
        print()
        print(text)
        if args.json_out and args.json_out.endswith(".json"):
            Path(args.json_out).parent.mkdir(parents=True, exist_ok=True)
            Path(args.json_out).write_text(to_json(report, indent=1) + "\n", encoding="utf-8")
    if report.run.interrupted:
        print(f"interrupted: resume with  stitch bench {shlex.quote(str(args.dir))} --resume --out "
              f"{shlex.quote(str(options.run_dir))}", file=sys.stderr)
        return 130
    if report.not_run:
        print(f"{len(report.not_run)} task(s) not run: resume with  stitch bench {shlex.quote(str(args.dir))} "
              f"--resume --out {shlex.quote(str(options.run_dir))}", file=sys.stderr)
    return 0


def _repeat(args, options: BenchOptions, settings: Settings) -> int:
    from stitch_lsp.benchsuite import repeat

    import json

    out = sys.stderr if args.json_out == "-" else sys.stdout
    reports, record = repeat.run_repeated(options, args.repeat, lambda one: run_bench(one, settings, out=out))
    for k, report in enumerate(reports, 1):
        print(f"\n== run {k} of {args.repeat} ({report.run.run_id})", file=out)
        print(render(report), file=out)
    text = repeat.render(record)
    if args.json_out == "-":
        print(json.dumps(record, indent=1))
        print(text, file=sys.stderr)
    else:
        print()
        print(text)
        print(f"\nevery figure: {options.run_dir / repeat.REPEAT_FILE}")
        if args.json_out and args.json_out.endswith(".json"):
            Path(args.json_out).parent.mkdir(parents=True, exist_ok=True)
            Path(args.json_out).write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    return 130 if any(r.run.interrupted for r in reports) else 0
