"""Which Stitch, torch and Python a machine runs, and whether a cluster's workers match this one.

A verdict depends on the code that produced it: a worker running another Stitch (an
old install shadowing the shipped one) or another torch release gives results that
cannot sit in one table. Read without importing torch (package metadata only).
"""

from __future__ import annotations

import hashlib
import platform
from importlib import metadata
from pathlib import Path

from attrs import define

import stitch_lsp


@define
class Versions:
    stitch: str
    stitch_source: str  # a digest of the imported stitch_lsp's .py files: equal only for the same code
    torch: str  # "" when torch is not installed
    python: str  # major.minor
    where: str = ""  # "this machine", or the worker's slot


def source_digest(package_dir: Path | None = None) -> str:
    root = Path(package_dir or Path(stitch_lsp.__file__).parent)
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        if "__pycache__" in path.parts:
            continue
        digest.update(path.relative_to(root).as_posix().encode())
        digest.update(b"\0")
        digest.update(path.read_bytes())
    return digest.hexdigest()[:12]


def torch_version() -> str:
    try:
        return metadata.version("torch")
    except metadata.PackageNotFoundError:
        return ""


def local_versions(where: str = "this machine") -> Versions:
    return Versions(stitch=stitch_lsp.__version__, stitch_source=source_digest(), torch=torch_version(),
                    python=".".join(platform.python_version_tuple()[:2]), where=where)


def release(version: str) -> str:
    """"2.11.0+cu130" -> "2.11.0": CPU and CUDA builds of one release trace and verify alike."""
    return version.split("+", 1)[0]


def mismatches(driver: Versions, workers: list[Versions]) -> list[str]:
    """One line per worker that differs from ``driver`` (or, for torch when the driver has none,
    from the first worker); empty when they all match."""
    problems = []
    torch_ref = driver if driver.torch else next((w for w in workers if w.torch), None)
    for w in workers:
        why = []
        if (w.stitch, w.stitch_source) != (driver.stitch, driver.stitch_source):
            why.append(f"Stitch {w.stitch} (source {w.stitch_source}) where {driver.where} runs "
                       f"{driver.stitch} (source {driver.stitch_source})")
        if w.python != driver.python:
            why.append(f"Python {w.python} where {driver.where} runs {driver.python}")
        if not w.torch:
            want = f" ({torch_ref.torch} on {torch_ref.where})" if torch_ref else ""
            why.append(f"no torch installed{want}")
        elif torch_ref is not None and release(w.torch) != release(torch_ref.torch):
            why.append(f"torch {w.torch} where {torch_ref.where} runs {torch_ref.torch}")
        if why:
            problems.append(f"{w.where}: " + "; ".join(why))
    return problems
