"""Run the static CUDA rules over a corpus and count what they find, rule by rule.

    python bench/rule_precision.py DIR_OR_FILE... [--out bench/results/rule_precision.json]
                                   [--list findings.txt] [--review bench/results/rule_precision.md]

Static rules only (no nvcc), exactly what `stitch check --no-compile` reports. Writes a
JSON summary: per rule its severity and number of findings by severity (a rule drops to
a hint where it cannot tell) and of distinct source lines, kernels seen, kernels the rules skipped (and whether each got a hint), files that
crashed the analysis, and the slowest file. ``--list`` writes every finding with the
source line it points at, one block per finding, for review by reading the code.

``--review FILE`` reads a reviewed sample (a Markdown table whose rows start
``| STCnnn | path:line | yes/no | ...``: is the finding worth acting on) and prints each
rule's precision over its reviewed rows next to the counts; rows whose finding no longer
fires are reported as stale.
"""

from __future__ import annotations

import argparse
import collections
import json
import re
import sys
import time
from pathlib import Path

from stitch_lsp.analysis.cuda_analysis import CudaAnalyzer
from stitch_lsp.analysis.rules import ALL_RULES
from stitch_lsp.findings import Severity

SUFFIXES = (".cu", ".cuh")
REVIEW_ROW = re.compile(r"^\|\s*(STC\d{3}|parse)\s*\|\s*`?([^|`]+?):(\d+)`?\s*\|\s*(yes|no)\s*\|", re.M)


def files_under(paths: list[str]) -> list[Path]:
    out: list[Path] = []
    for raw in paths:
        p = Path(raw)
        if p.is_dir():
            out += sorted(f for f in p.rglob("*") if f.is_file() and f.name.lower().endswith(SUFFIXES))
        elif p.is_file():
            out.append(p)
        else:
            sys.exit(f"rule_precision: {raw}: no such file or directory")
    return out


def shown_path(path: Path, roots: list[Path]) -> str:
    for root in roots:
        try:
            return str(path.resolve().relative_to(root.resolve().parent))
        except ValueError:
            continue
    return str(path)


def run(paths: list[str]) -> tuple[dict, list[dict]]:
    roots = [Path(p) for p in paths]
    per_rule: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    listing: list[dict] = []
    crashes: list[str] = []
    kernels = skipped = skipped_silent = 0
    slowest = (0.0, "")
    files = files_under(paths)
    for path in files:
        text = path.read_text(encoding="utf-8", errors="replace")
        shown = shown_path(path, roots)
        started = time.process_time()
        try:
            analysis = CudaAnalyzer(shown).analyze(text)
        except Exception as exc:  # the number that must stay 0
            crashes.append(f"{shown}: {type(exc).__name__}: {exc}")
            continue
        took = time.process_time() - started  # CPU time: the machine may be shared
        slowest = max(slowest, (took, shown))
        lines = text.split("\n")
        hinted = {f.range.start.line for f in analysis.findings if f.code == "parse"}
        for k in analysis.kernels:
            if k.body_range is None:
                continue
            kernels += 1
            if not k.parse_ok:
                skipped += 1
                skipped_silent += k.name_range.start.line not in hinted
        seen_lines: set[tuple[str, int]] = set()
        for f in analysis.findings:
            line = f.range.start.line
            c = per_rule[f.code]
            c["findings"] += 1
            c[f"severity:{f.severity.name.lower()}"] += 1
            if (f.code, line) not in seen_lines:
                seen_lines.add((f.code, line))
                c["lines"] += 1
            listing.append({"code": f.code, "severity": f.severity.name.lower(), "where": f"{shown}:{line + 1}",
                            "message": f.message, "source": lines[line].strip() if line < len(lines) else ""})
    summary = {
        "files": len(files),
        "kernels": kernels,
        "kernels_skipped": skipped,
        "kernels_skipped_without_hint": skipped_silent,
        "crashes": crashes,
        "slowest_file": {"path": slowest[1], "cpu_ms": round(slowest[0] * 1000, 1)},
        "rules": {
            r.meta.code: {"severity": r.meta.severity.name.lower(), "findings": per_rule[r.meta.code]["findings"],
                          "lines": per_rule[r.meta.code]["lines"],
                          "by_severity": {k.split(":", 1)[1]: v for k, v in per_rule[r.meta.code].items()
                                          if k.startswith("severity:")}}
            for r in ALL_RULES
        },
        "hints": {code: dict(c) for code, c in per_rule.items() if not code.startswith("STC")},
    }
    return summary, listing


def review(md: Path, listing: list[dict]) -> dict[str, dict]:
    """Precision per rule over the reviewed rows of ``md`` that still fire. Rows whose
    finding is a hint of a warning rule (it dropped to a hint where it could not tell) are
    counted apart: precision is about what is shown as a warning or an error."""
    firing: dict[tuple[str, str], set[str]] = collections.defaultdict(set)
    for f in listing:
        firing[(f["code"], f["where"])].add(f["severity"])
    meta = {r.meta.code: r.meta.severity for r in ALL_RULES}
    out: dict[str, dict] = collections.defaultdict(
        lambda: {"reviewed": 0, "worth_acting_on": 0, "hints_reviewed": 0, "stale": []})
    for code, path, line, verdict in REVIEW_ROW.findall(md.read_text(encoding="utf-8")):
        where = f"{path.strip()}:{line}"
        row = out[code]
        severities = firing.get((code, where))
        if not severities:
            row["stale"].append(where)
            continue
        if severities == {"hint"} and meta.get(code) is not Severity.HINT:
            row["hints_reviewed"] += 1
            continue
        row["reviewed"] += 1
        row["worth_acting_on"] += verdict == "yes"
    return dict(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("paths", nargs="+", metavar="DIR")
    ap.add_argument("--out", type=Path, help="write the JSON summary here (default: print it)")
    ap.add_argument("--list", type=Path, help="write every finding with its source line here")
    ap.add_argument("--review", type=Path, help="a reviewed sample (Markdown) to compute precision from")
    args = ap.parse_args()
    summary, listing = run(args.paths)
    if args.review is not None:
        summary["review"] = review(args.review, listing)
    text = json.dumps(summary, indent=2)
    if args.out is not None:
        args.out.write_text(text + "\n", encoding="utf-8")
    else:
        print(text)
    if args.list is not None:
        blocks = [f"{f['where']}: {f['severity']} {f['code']} {f['message']}\n    {f['source']}" for f in listing]
        args.list.write_text("\n".join(blocks) + "\n", encoding="utf-8")
    # The table, last.
    print(f"{summary['files']} files, {summary['kernels']} kernels ({summary['kernels_skipped']} skipped, "
          f"{summary['kernels_skipped_without_hint']} without a hint), {len(summary['crashes'])} crashes; "
          f"slowest file {summary['slowest_file']['cpu_ms']} ms CPU", file=sys.stderr)
    print(f"{'rule':8} {'severity':8} {'findings':>8} {'hints':>6} {'lines':>6}  reviewed  precision", file=sys.stderr)
    for code, r in summary["rules"].items():
        hints = r["by_severity"].get("hint", 0) if r["severity"] != "hint" else 0
        rv = summary.get("review", {}).get(code)
        prec = ""
        if rv and rv["reviewed"]:
            prec = f"{rv['reviewed']:8d}  {rv['worth_acting_on'] / rv['reviewed']:6.0%}"
            if rv["stale"]:
                prec += f"  ({len(rv['stale'])} stale)"
        print(f"{code:8} {r['severity']:8} {r['findings'] - hints:8d} {hints:6d} {r['lines']:6d}  {prec}",
              file=sys.stderr)
    return 1 if summary["crashes"] else 0


if __name__ == "__main__":
    sys.exit(main())
