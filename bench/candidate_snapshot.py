"""Snapshot the template Coder's candidates for a set of tasks, on the CPU: what to compare across a refactor.

    PYTHONPATH=. python bench/candidate_snapshot.py bench/tasks ../shared/corpora/kernelbench/level1 \\
        ../shared/corpora/kernelbench/level2 --out /tmp/snap_before [--tiles gemm_tiles.json]
    PYTHONPATH=. python bench/candidate_snapshot.py --compare /tmp/snap_before /tmp/snap_after \
        [--renamed stitch_lsp.agents.template_coder=stitch_lsp.coders.template]

Each task goes through the fuse service (``fuse_task``) exactly as ``stitch fuse --no-verify`` and
``stitch bench --coder template`` send it: plan, template Coder, the files kept under
``.stitch/tasks/``. Only the tracing is done in this process (the service would start a worker
process per task; the worker's own ``trace_task`` is called instead). The plan is made for a fixed
device (an H200, so sm_90 kernels) with a fixed GEMM tile cache (``--tiles``; by default two measured entries, so both the table's
tiles and measured ones are generated),
and STITCH_* layout overrides are cleared, so two runs differ only by the code.

Writes ``OUT/<dir>/<task>/`` with the candidate's binding module (``candidate.py``), every kernel
source, its notes (``notes.txt``), the plan (``plan.txt``) and ``message.txt`` (the service's one line); ``OUT/MANIFEST`` holds one sha256 per file,
sorted, so two snapshots are identical exactly when their manifests are.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from stitch_lsp.fuse import service as fuse_service  # noqa: E402
from stitch_lsp.pipeline import Task  # noqa: E402
from stitch_lsp.settings import Settings  # noqa: E402
from stitch_lsp.verdict import DeviceInfo  # noqa: E402
from stitch_lsp.worker.trace_handler import trace_task  # noqa: E402

DEVICE = DeviceInfo(name="NVIDIA H200", compute_capability="9.0", sm_count=132)


def _trace_here(task, settings, *, verifier=None, cancel=None, timeout_s=180.0):
    return trace_task(task.source)


def snapshot_task(path: Path, workdir: Path, out: Path) -> str:
    source = path.read_text(encoding="utf-8")
    task = Task(name=path.stem, source=source, origin_path=None, shape_source="get_inputs")
    try:
        outcome = fuse_service.fuse_task(task, Settings(), coder="template", verifier=None, workdir=workdir,
                                         device=DEVICE, verify_library_only=True)
    except Exception as exc:  # noqa: BLE001 - a crash is part of the snapshot too
        outcome = None
        message = f"crashed: {type(exc).__name__}: {exc}"
    else:
        message = outcome.message.replace(str(workdir), "<workdir>")
    out.mkdir(parents=True, exist_ok=True)
    (out / "message.txt").write_text(message + "\n", encoding="utf-8")
    candidate = outcome.candidate if outcome is not None else None
    if candidate is not None:
        (out / "candidate.py").write_text(candidate.module_source, encoding="utf-8")
        for name, text in sorted(candidate.cuda_sources.items()):
            (out / name).write_text(text, encoding="utf-8")
        notes = [*candidate.notes, *(f"library: {c}" for c in candidate.library_calls),
                 *(f"blocking: {op}" for op in candidate.blocking_ops), *(f"uncovered: {op}" for op in candidate.uncovered_ops)]
        (out / "notes.txt").write_text("".join(f"{line}\n" for line in notes), encoding="utf-8")
    if outcome is not None and outcome.plan_text:
        (out / "plan.txt").write_text(outcome.plan_text + "\n", encoding="utf-8")
    return message


def manifest(root: Path) -> str:
    lines = []
    for file in sorted(p for p in root.rglob("*") if p.is_file() and p.name != "MANIFEST"):
        lines.append(f"{hashlib.sha256(file.read_bytes()).hexdigest()}  {file.relative_to(root)}")
    return "\n".join(lines) + "\n"


def compare(before: Path, after: Path, renamed: list[tuple[str, str]]) -> int:
    """0 when every file of the two snapshots is the same, byte for byte, once each module path ``renamed``
    (a generated module names the one it re-lowers itself with) is read as the new one."""
    names = sorted(({p.relative_to(before) for p in before.rglob("*") if p.is_file()}
                    | {p.relative_to(after) for p in after.rglob("*") if p.is_file()}) - {Path("MANIFEST")})
    same = by_rename = 0
    differ = []
    for name in names:
        a, b = before / name, after / name
        if not (a.exists() and b.exists()):
            differ.append(f"{name}: only in {'after' if b.exists() else 'before'}")
            continue
        old, new = a.read_bytes(), b.read_bytes()
        if old == new:
            same += 1
            continue
        for was, now in renamed:
            old = old.replace(was.encode(), now.encode())
        if old == new:
            by_rename += 1
        else:
            differ.append(f"{name}: differs")
    print(f"{len(names)} files: {same} identical, {by_rename} identical but for the renamed module paths, "
          f"{len(differ)} different")
    for line in differ[:50]:
        print("  " + line)
    return 1 if differ else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dirs", nargs="*", type=Path)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--compare", nargs=2, type=Path, metavar=("BEFORE", "AFTER"))
    parser.add_argument("--renamed", action="append", default=[], metavar="OLD=NEW",
                        help="a module path a generated module names that moved (repeatable)")
    parser.add_argument("--tiles", type=Path, default=Path(__file__).with_name("candidate_snapshot_tiles.json"),
                        help="the .stitch/gemm_tiles.json to plan with (default: two measured GEMM tiles of bench/tasks)")
    args = parser.parse_args()
    if args.compare:
        return compare(*args.compare, [tuple(r.split("=", 1)) for r in args.renamed])
    if not args.dirs or args.out is None:
        parser.error("give the task folders and --out (or --compare BEFORE AFTER)")
    for key in [k for k in os.environ if k.startswith("STITCH_")]:
        del os.environ[key]
    fuse_service.trace = _trace_here
    if args.out.exists():
        shutil.rmtree(args.out)
    started = time.perf_counter()
    count = 0
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        if args.tiles.name:
            (workdir / ".stitch").mkdir()
            shutil.copy(args.tiles, workdir / ".stitch" / "gemm_tiles.json")
        for directory in args.dirs:
            for path in sorted(p for p in directory.glob("*.py") if p.name != "__init__.py"):
                message = snapshot_task(path, workdir, args.out / directory.name / path.stem)
                count += 1
                print(f"{directory.name}/{path.stem}: {message[:120]}", flush=True)
    (args.out / "MANIFEST").write_text(manifest(args.out), encoding="utf-8")
    print(f"{count} tasks in {time.perf_counter() - started:.0f} s; manifest {args.out / 'MANIFEST'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
