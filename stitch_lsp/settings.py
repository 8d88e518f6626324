"""Typed settings, merged in one place.

Sources, later wins: defaults → ``[tool.stitch]`` in the workspace's
``pyproject.toml`` → initialization options → ``workspace/configuration``
(section ``stitch``) / ``didChangeConfiguration``. Clients send camelCase
(``nvccPath``); both spellings are accepted. Unknown keys are ignored and
reported once, never fatal.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

import attrs
from attrs import define, field

from stitch_lsp.serde import converter


@define
class OnSave:
    """What runs when a file is saved."""

    compile: bool = True  # nvcc on .cu / .cuh
    rules: bool = True  # static rubric rules (also run on change)
    verify: bool = True  # paired kernels: correctness + timing (trusted workspaces only)
    profile: bool = False  # paired kernels: Nsight Compute as well
    sanitize: bool = False  # paired kernels: compute-sanitizer as well


@define
class KernelPair:
    """``[[tool.stitch.pair]]``: a handwritten kernel checked against a reference on save
    (the same keys as a ``// stitch:`` comment above the kernel; see README)."""

    kernel: str  # "path/to/file.cu:kernel_name", relative to the workspace root
    reference: str  # KernelBench-style reference file, relative to the workspace root
    launch: str = ""  # "grid=... block=... args=..." as in the comment
    binding: str = ""  # a Python file defining ModelNew, instead of `launch`


@define
class Settings:
    nvcc_path: str = "nvcc"
    # "" = detect from the GPU (nvidia-smi), else sm_90.
    arch: str = ""
    include_paths: list[str] = field(factory=list)
    extra_flags: list[str] = field(factory=list)
    compile_timeout_s: float = 60.0
    verify_timeout_s: float = 300.0
    profile_timeout_s: float = 300.0
    gpu_index: int = 0
    on_save: OnSave = field(factory=OnSave)
    # Coder: "template" (built-in, offline), "llm" (Anthropic), "auto" (template, then llm where uncovered).
    coder: str = "auto"
    model: str = "claude-sonnet-4-6"  # claude-sonnet-4-5 reaches end-of-life on 2026-11-30 (anthropic SDK 2.12)
    rounds: int = 3
    # Replies the LLM Coder asks for in each round, verified at once on as many GPUs as the verifier
    # has (a multi-GPU or Ray executor; docs/cluster.md). 1: one reply a round, as a single GPU wants.
    candidates_per_round: int = 1
    token_budget: int = 200_000
    target_speedup: float = 2.0
    judge: bool = False  # an optional model judge for the rubric
    # Fallback shapes for fuse, by variable name: {"x": "8x1024 float32"}.
    shapes: dict[str, str] = field(factory=dict)
    cache_max_mb: int = 512
    kernels_dir: str = "stitch_kernels"  # where accepted fused kernels go in the workspace
    # Set by the client (workspace trust); nothing is executed until it is true.
    trusted: bool = False
    python: str = ""  # interpreter for worker processes; "" = the server's own
    # Quiet time after a keystroke before static rules run (0 = at once; benchmarks use 0).
    diagnostics_debounce_ms: int = 150
    # Kernel ↔ reference pairs ([[tool.stitch.pair]] in pyproject.toml).
    pair: list[KernelPair] = field(factory=list)

    def replace(self, **changes: Any) -> "Settings":
        return attrs.evolve(self, **changes)


_CAMEL = re.compile(r"(?<!^)(?=[A-Z])")


def _snake(key: str) -> str:
    return _CAMEL.sub("_", key).lower()


def _normalise(data: Any) -> Any:
    if isinstance(data, dict):
        return {_snake(k) if isinstance(k, str) else k: _normalise(v) for k, v in data.items()}
    return data


_FIELDS = {f.name for f in attrs.fields(Settings)}


def merge(base: Settings, raw: dict[str, Any] | None) -> tuple[Settings, list[str]]:
    """Apply a (possibly partial, camelCase) dict over ``base``.

    Returns the new settings and the keys that were ignored (unknown or ill-typed),
    so the caller can tell the user once.
    """
    if not raw:
        return base, []
    data = _normalise(raw)
    if "stitch" in data and isinstance(data["stitch"], dict):
        data = data["stitch"]
    ignored: list[str] = []
    current = converter.unstructure(base)
    for key, value in data.items():
        if key not in _FIELDS:
            ignored.append(key)
            continue
        if value is None:
            continue
        if key == "on_save" and isinstance(value, dict):
            value = {**current["on_save"], **value}
        trial = {**current, key: value}
        try:
            converter.structure(trial, Settings)
        except Exception:
            ignored.append(key)
            continue
        current = trial
    return converter.structure(current, Settings), ignored


def from_pyproject(root: Path) -> dict[str, Any]:
    """The ``[tool.stitch]`` table of ``root/pyproject.toml`` (empty when absent or broken)."""
    path = root / "pyproject.toml"
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return {}
    table = data.get("tool", {}).get("stitch", {})
    return table if isinstance(table, dict) else {}
