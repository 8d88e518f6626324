"""A run directory: one JSON per finished task, so a run survives Ctrl-C and resumes.

    <run>/run.json               RunInfo (rewritten as the run goes)
    <run>/results/<task>.json    TaskResult, written the moment the task finishes
    <run>/details/<task>.json    plan, candidate and verdict behind it
    <run>/report.json, table.txt the whole run, written at the end (also after Ctrl-C)
    <run>/logs/                  each GPU shard's stderr
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from stitch_lsp.benchsuite.results import INTERRUPTED, BenchReport, RunInfo, TaskDetail, TaskResult
from stitch_lsp.serde import from_json, to_json

DEFAULT_BASE = Path(".stitch") / "bench"


def new_run_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S")


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def latest_run(base: Path) -> Path | None:
    runs = [p for p in base.iterdir() if (p / "run.json").is_file()] if base.is_dir() else []
    return max(runs, key=lambda p: (p / "run.json").stat().st_mtime) if runs else None


class RunStore:
    def __init__(self, directory: Path) -> None:
        self.dir = directory

    @property
    def logs(self) -> Path:
        return self.dir / "logs"

    def save_info(self, info: RunInfo) -> None:
        _write(self.dir / "run.json", to_json(info, indent=1))

    def load_info(self) -> RunInfo | None:
        try:
            return from_json((self.dir / "run.json").read_text(encoding="utf-8"), RunInfo)
        except (OSError, ValueError, TypeError, KeyError):
            return None

    def save(self, result: TaskResult, detail: TaskDetail | None) -> None:
        if detail is not None:  # detail first: a result on disk always has its detail beside it
            _write(self.dir / "details" / f"{result.name}.json", to_json(detail, indent=1))
        _write(self.dir / "results" / f"{result.name}.json", to_json(result, indent=1))

    def finished(self) -> dict[str, TaskResult]:
        """Results already on disk (what ``--resume`` skips). Unreadable files are ignored and rerun."""
        found: dict[str, TaskResult] = {}
        folder = self.dir / "results"
        if not folder.is_dir():
            return found
        for path in sorted(folder.glob("*.json")):
            try:
                result = from_json(path.read_text(encoding="utf-8"), TaskResult)
            except (OSError, ValueError, TypeError, KeyError, Exception):
                continue
            if result.status != INTERRUPTED and result.name == path.stem:
                found[result.name] = result
        return found

    def save_report(self, report: BenchReport, table: str) -> None:
        _write(self.dir / "report.json", to_json(report, indent=1))
        _write(self.dir / "table.txt", table)
