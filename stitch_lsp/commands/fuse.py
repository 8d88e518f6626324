"""``stitch fuse FILE.py:START-END [--apply] [--json]``: fuse selected lines into a CUDA kernel.

Prints the plan and the verdict. ``--apply`` writes the edit (the kernel module,
the loader, and the selection replaced by a call) only when the Verifier passed.

With the LLM Coder, ``--candidates N`` asks for N candidates a round and verifies
them at once: on N of this machine's GPUs, or with ``--cluster`` on a Ray
cluster's (docs/cluster.md).
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from stitch_lsp.cancellation import CancelToken, ProgressEvent
from stitch_lsp.commands.workspace_settings import add_trust_flag, load


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("fuse", help="fuse selected PyTorch lines into a verified CUDA kernel",
                       description=__doc__)
    p.add_argument("target", help="FILE.py:START-END (1-based lines, inclusive)")
    p.add_argument("--apply", action="store_true", help="write the edit when the kernel passes verification")
    p.add_argument("--json", action="store_true", help="print the outcome as JSON")
    p.add_argument("--coder", default="template", choices=["template", "llm", "auto"])
    p.add_argument("--workspace", type=Path, default=None, help="workspace root (default: the file's project)")
    p.add_argument("--no-verify", action="store_true", help="plan and generate only")
    p.add_argument("--tune-gemm", action="store_true",
                   help="first time every tile of the GEMM kernels on this GPU and cache the fastest "
                        "(.stitch/gemm_tiles.json); later fuses use them")
    p.add_argument("--no-record", action="store_true",
                   help="never run the file's get_inputs() to record missing shapes")
    p.add_argument("--precision", choices=("fp32", "bf16", "fp16"), default="fp32",
                   help="fuse for this precision: the task's model and floating inputs cast, as KernelBench's "
                        "harness does (default fp32); shapes recorded from your program keep their recorded dtypes")
    add_trust_flag(p)
    p.add_argument("--candidates", type=int, default=None, metavar="N",
                   help="LLM Coder: candidates asked for and verified at once each round (default: the "
                        "candidatesPerRound setting, 1); one GPU verifies each")
    p.add_argument("--cluster", nargs="?", const="", default=None, metavar="ADDRESS",
                   help="verify the candidates on a Ray cluster's GPUs: ray://HOST:PORT, HOST:PORT, auto, or no "
                        "value for $RAY_ADDRESS; needs pip install 'stitch-lsp[cluster]' (docs/cluster.md)")
    p.set_defaults(func=run)


def _workspace_for(path: Path) -> Path:
    for parent in [path.parent, *path.parent.parents]:
        if (parent / ".stitch" / "recordings").is_dir():  # where `stitch record` ran: the recordings' root
            return parent
    for parent in [path.parent, *path.parent.parents]:
        if (parent / "pyproject.toml").exists() or (parent / ".git").exists():
            return parent
    return path.parent


def parse_target(target: str) -> tuple[Path, int, int]:
    m = re.fullmatch(r"(.+?):(\d+)(?:-(\d+))?", target)
    if not m:
        raise ValueError(f"expected FILE.py:START-END, got {target!r}")
    start = int(m.group(2))
    end = int(m.group(3) or start)
    if start < 1 or end < start:
        raise ValueError(f"bad line range {start}-{end}")
    return Path(m.group(1)), start, end


def _has_get_inputs(source: str) -> bool:
    """The file's own entry point the get_inputs() recorder runs (a benchmark-style file)."""
    return re.search(r"^def get_inputs\(", source, re.M) is not None


def _verifier(settings, root: Path, coder: str = "template", cluster: str | None = None):
    """This machine's Verifier; or, for several candidates a round or a cluster, a pool of GPU workers."""
    if cluster is not None or (coder != "template" and settings.candidates_per_round > 1):
        from stitch_lsp.benchsuite import gpus
        from stitch_lsp.benchsuite.candidate_pool import CandidatePool
        from stitch_lsp.benchsuite.executor import ExecutorError, WorkerSpec
        from stitch_lsp.benchsuite.suite import make_executor

        if cluster is not None or len(gpus.visible_gpus()) > 1:
            executor = make_executor(cluster, gpus=settings.candidates_per_round)
            spec = WorkerSpec(coder=coder, settings=settings.replace(gpu_index=0), run_dir=root / ".stitch" / "pool")
            try:
                workers = executor.start(spec, settings.candidates_per_round, sys.stderr)
            except ExecutorError as exc:
                executor.close()
                return None, str(exc)
            return CandidatePool(workers, executor), ""
    try:
        from stitch_lsp.verify.service import Verifier
    except ImportError as exc:
        return None, f"the Verifier is not available ({exc})"
    # Its job folders and worker logs are generated files: under .stitch/, never beside the user's.
    return Verifier(settings, root / ".stitch" / "work"), ""


def run(args: argparse.Namespace) -> int:
    from stitch_lsp.task.selection import prepare

    try:
        path, start, end = parse_target(args.target)
    except ValueError as exc:
        print(f"stitch fuse: {exc}", file=sys.stderr)
        return 2
    try:
        source = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        print(f"stitch fuse: cannot read {path}: {exc}", file=sys.stderr)
        return 2
    root = (args.workspace or _workspace_for(path.resolve())).resolve()
    settings = load(root, args, "fuse")
    if args.candidates is not None:
        settings = settings.replace(candidates_per_round=max(1, args.candidates))
    rel = str(path.resolve().relative_to(root)) if path.resolve().is_relative_to(root) else str(path)
    prepared = prepare(source, rel, start - 1, end - 1, settings, root=root)
    if prepared.task is None and prepared.missing_shapes and not args.no_record and _has_get_inputs(source):
        # Asked for from a terminal: run the file's own entry point under the shape recorder.
        from stitch_lsp.task.shapes import record

        recorded, why = record(prepared.region, source, python=settings.python)
        if recorded is not None:
            prepared = prepare(source, rel, start - 1, end - 1, settings, recorded, root=root)
        elif not args.json:
            print(f"stitch fuse: shape recorder: {why}", file=sys.stderr)
    if prepared.task is None:
        print(f"stitch fuse: cannot fuse {args.target}: {prepared.problem}", file=sys.stderr)
        if prepared.missing_shapes and not prepared.region.problems and prepared.shapes is not None:
            # What the editor's quick fix would insert: shapes consistent with the selection's ops.
            from stitch_lsp.task.shapes import comment_template

            print(f"stitch fuse: for example, above line {prepared.region.range.start.line + 1}:\n"
                  + comment_template(prepared.region, prepared.shapes), file=sys.stderr)
        return 1
    verifier, why = (None, "--no-verify") if args.no_verify else _verifier(settings, root, args.coder, args.cluster)
    if verifier is None and args.cluster is not None:
        print(f"stitch fuse: {why}", file=sys.stderr)
        return 2
    if verifier is None and not args.no_verify:
        print(f"stitch fuse: {why}; planning and generating only", file=sys.stderr)
    try:
        return _fuse(args, path, source, root, settings, prepared, verifier)
    finally:
        if verifier is not None:  # its workers go (a pool's: shard processes, perhaps a cluster job)
            verifier.close()


def with_precision(task, precision: str, quiet: bool = False):
    """``task`` cast to ``precision``, unless its shapes were recorded from the user's program (those dtypes win)."""
    import attrs

    from stitch_lsp.task.precision import cast_source, for_task

    chosen, note = for_task(precision, task.shape_source, [t.dtype for t in task.inputs])
    if note and not quiet:
        print(f"stitch fuse: {note}", file=sys.stderr)
    return attrs.evolve(task, source=cast_source(task.source, chosen)) if chosen != "fp32" else task


def _fuse(args: argparse.Namespace, path: Path, source: str, root: Path, settings, prepared, verifier) -> int:
    from stitch_lsp.fuse.edit import apply_text_edits, build_edit, names_for
    from stitch_lsp.fuse.outcome import outcome_json
    from stitch_lsp.fuse.service import fuse_task

    def report(ev: ProgressEvent) -> None:
        if not args.json:
            print(f"[{ev.stage}] {ev.message}", file=sys.stderr)

    task = with_precision(prepared.task, args.precision, quiet=args.json)
    if prepared.shapes_from() and not args.json:
        print(f"Shapes: {prepared.shapes_from()}", file=sys.stderr)
    module_path, func = names_for(task, settings)
    outcome = fuse_task(task, settings, coder=args.coder, verifier=verifier, cancel=CancelToken(),
                        report=report, workdir=root, edit_namer=lambda _o: (module_path, func),
                        tune_gemm=args.tune_gemm and verifier is not None)
    if args.json:
        print(outcome_json(outcome))
    else:
        if outcome.plan_text:
            print(outcome.plan_text)
        if outcome.candidate is not None and outcome.candidate.uncovered_ops:
            print("Left as PyTorch: " + "; ".join(outcome.candidate.uncovered_ops))
        if outcome.verdict is not None:
            print(f"Verdict: {outcome.verdict.status.value}: {outcome.verdict.summary}")
        print(outcome.message)
        print(f"Files kept in {outcome.task_dir}")
    if args.apply:
        if not outcome.offerable:
            print("stitch fuse: nothing applied (the kernel did not pass verification)", file=sys.stderr)
            return 1
        edit = build_edit(task, outcome.plan.graph, source, outcome.edit_files, module_path, func,
                          indent=prepared.region.indent, returns=prepared.region.returns)
        for rel_path, text in edit.files.items():
            target = root / rel_path
            if target.name == "__init__.py" and target.exists():
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text, encoding="utf-8")
        path.write_text(apply_text_edits(source, edit.edits), encoding="utf-8")
        print(f"Applied: {path} now calls {edit.module}.{func}")
    if outcome.verdict is None:
        return 0 if outcome.candidate is not None and args.no_verify else 1
    return 0 if outcome.offerable or (outcome.verdict and outcome.verdict.status.value == "correct") else 1
