"""Real model files end to end: record the user's program, then fuse each selection a user would make.

For each model folder under MODELS (``nanoGPT/``, ``minGPT/``, each with a ``drive.py``) and each line of
``MODELS/SELECTIONS`` (``<folder>/<file> <start>-<end> <what>``):

1. copy the folder to a temporary workspace (the corpus is never written);
2. time ``python drive.py`` bare and under ``stitch record -- python drive.py`` (the recording overhead);
3. ``stitch fuse FILE:LINES --json`` with no ``# stitch:`` comment added, and read its outcome.

Without a GPU every selection must reach a generated candidate and say it cannot be checked here;
on a GPU each ends in a verdict. No command may print a traceback. Results: ``$OUT/models_fuse.json``
and ``$OUT/models_fuse.md`` (``OUT`` defaults to ``bench/results/models_fuse``).

    python bench/models_fuse.py [MODELS] [--repeat 3] [--coder template] [--folder nanoGPT] [--no-overhead]

On a GPU machine: ``bash bench/models_fuse_gpu.sh`` (one folder a call, to fit a call's time limit).

Exit status 0 when every selection reached a candidate (and, with a GPU, a verdict) without a traceback.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CANDIDATES = [REPO.parent / "shared" / "corpora" / "models", REPO / "shared" / "corpora" / "models"]


def stitch(*args: str, cwd: Path, timeout: float = 900) -> tuple[int, str, str, float]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "stitch_lsp.cli", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout)
    return proc.returncode, proc.stdout, proc.stderr, time.perf_counter() - t0


def timed(cmd: list[str], cwd: Path, env: dict | None = None) -> tuple[float, float]:
    """(wall seconds, CPU seconds of the child): CPU time is steadier on a shared machine."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(cmd, cwd=cwd, env=env, check=True, capture_output=True, timeout=900)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def overhead(ws: Path, repeat: int) -> dict:
    """Median wall time of drive.py bare and under the recorder (the recorder's own bootstrap, timed alone)."""
    sys.path.insert(0, str(REPO))
    from stitch_lsp.recording.run import recorder_env

    scratch = Path(tempfile.mkdtemp(prefix="stitch-rec-"))
    bare = [timed([sys.executable, "drive.py"], ws) for _ in range(repeat)]
    recorded = [timed([sys.executable, "drive.py"], ws, recorder_env(scratch, f"bench{i}")) for i in range(repeat)]
    shutil.rmtree(scratch, ignore_errors=True)
    # Without the ~2 s of `import torch` both share: the part of the run the recorder can slow down.
    imp = [timed([sys.executable, "-c", "import torch"], ws) for _ in range(repeat)]
    b, r, i = (statistics.median(w for w, _ in runs) for runs in (bare, recorded, imp))
    bc, rc, ic = (statistics.median(c for _, c in runs) for runs in (bare, recorded, imp))
    return {"bare_s": round(b, 3), "recorded_s": round(r, 3), "import_torch_s": round(i, 3),
            "ratio": round(r / b, 3), "ratio_after_import": round((r - i) / max(b - i, 1e-6), 3),
            "bare_cpu_s": round(bc, 3), "recorded_cpu_s": round(rc, 3), "cpu_ratio": round(rc / bc, 3),
            "cpu_ratio_after_import": round((rc - ic) / max(bc - ic, 1e-6), 3)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("models", nargs="?", type=Path, default=next((c for c in CANDIDATES if c.is_dir()), CANDIDATES[0]))
    ap.add_argument("--repeat", type=int, default=3, help="runs of drive.py timed each way")
    ap.add_argument("--coder", default="template")
    ap.add_argument("--folder", action="append", default=None,
                    help="only this model folder (repeatable): split a GPU run into calls that fit its time limit")
    ap.add_argument("--no-overhead", action="store_true", help="do not time drive.py bare and recorded")
    args = ap.parse_args()
    out_dir = Path(os.environ.get("OUT") or REPO / "bench" / "results" / "models_fuse")
    out_dir.mkdir(parents=True, exist_ok=True)
    selections = []
    for line in (args.models / "SELECTIONS").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            path, lines, *what = line.split()
            if args.folder is None or path.split("/", 1)[0] in args.folder:
                selections.append((path, lines, " ".join(what)))
    tmp = Path(tempfile.mkdtemp(prefix="stitch-models-"))
    results: dict = {"models": str(args.models), "python": sys.version.split()[0], "folders": {}, "selections": []}
    ok_all = True
    for folder in sorted({p.split("/", 1)[0] for p, _, _ in selections}):
        ws = tmp / folder
        shutil.copytree(args.models / folder, ws)
        rc, out, err, secs = stitch("record", "--", sys.executable, "drive.py", cwd=ws)
        entry = {"record_command": "stitch record -- python drive.py", "record_rc": rc, "record_s": round(secs, 2),
                 "record_message": err.strip().splitlines()[-1] if err.strip() else "",
                 "traceback": "Traceback" in out + err}
        if not args.no_overhead:
            entry.update(overhead(ws, args.repeat))
        results["folders"][folder] = entry
        ok_all &= rc == 0 and not entry["traceback"]
        print(f"{folder}: {entry['record_message']}" + ("" if args.no_overhead else
              f"; overhead {entry['ratio']}x wall, {entry['cpu_ratio']}x CPU "
              f"({entry['cpu_ratio_after_import']}x CPU after import torch)"), flush=True)
    for path, lines, what in selections:
        folder, rel = path.split("/", 1)
        cmd = ["fuse", f"{rel}:{lines}", "--json", "--coder", args.coder]
        rc, out, err, secs = stitch(*cmd, cwd=tmp / folder)
        row = {"selection": f"{path}:{lines}", "what": what, "command": "stitch " + " ".join(cmd), "rc": rc,
               "seconds": round(secs, 1), "traceback": "Traceback" in out + err}
        try:
            outcome = json.loads(out)
        except ValueError:
            outcome = None
            row["problem"] = (err.strip().splitlines() or ["no output"])[0]
        if outcome is not None:
            cand, verdict = outcome.get("candidate"), outcome.get("verdict")
            row["candidate"] = cand is not None
            row["shape_source"] = (outcome.get("task") or {}).get("shape_source", "")
            row["message"] = outcome.get("message", "")
            row["verdict"] = (verdict or {}).get("status")
            row["summary"] = (verdict or {}).get("summary", "")
            timing = (verdict or {}).get("timing") or {}
            row["vs_eager"] = timing.get("speedup_vs_eager")
            row["vs_compile"] = timing.get("speedup_vs_compile")
            row["task_dir"] = outcome.get("task_dir", "")
            keep = out_dir / "tasks" / f"{path.replace('/', '_')}_{lines}"
            for f in ("reference.py", "candidate.py", "plan.json", "verdict.json"):
                if row["task_dir"] and (Path(row["task_dir"]) / f).is_file():
                    keep.mkdir(parents=True, exist_ok=True)
                    shutil.copy(Path(row["task_dir"]) / f, keep / f)
        reached = bool(row.get("candidate")) and row.get("verdict") is not None and not row["traceback"]
        ok_all &= reached
        results["selections"].append(row)
        print(f"{row['selection']}: {row.get('verdict') or row.get('problem')}: "
              f"{row.get('message') or ''} [{row['seconds']} s]", flush=True)
    name = "models_fuse" + ("_" + "_".join(args.folder) if args.folder else "")
    (out_dir / f"{name}.json").write_text(json.dumps(results, indent=1))
    md = ["| selection | what | verdict | vs eager | vs torch.compile | shapes |", "| --- | --- | --- | --- | --- | --- |"]
    for r in results["selections"]:
        md.append(f"| {r['selection']} | {r['what']} | {r.get('verdict') or r.get('problem')} | {r.get('vs_eager')} "
                  f"| {r.get('vs_compile')} | {r.get('shape_source', '')} |")
    for folder, e in results["folders"].items():
        if "bare_s" not in e:
            continue
        md.append(f"\n{folder}: drive.py {e['bare_s']} s bare, {e['recorded_s']} s recorded ({e['ratio']}x wall; "
                  f"{e['ratio_after_import']}x of the part after `import torch`, {e['import_torch_s']} s); CPU time "
                  f"{e['bare_cpu_s']} s bare, {e['recorded_cpu_s']} s recorded ({e['cpu_ratio']}x; "
                  f"{e['cpu_ratio_after_import']}x after `import torch`)")
    (out_dir / f"{name}.md").write_text("\n".join(md) + "\n")
    print(f"results in {out_dir}")
    shutil.rmtree(tmp, ignore_errors=True)
    return 0 if ok_all else 1


if __name__ == "__main__":
    sys.exit(main())
