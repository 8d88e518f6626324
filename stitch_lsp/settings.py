"""Typed settings, merged in one place.

Sources, later wins: defaults → the user's own config file
(``~/.config/stitch/config.toml``) → the user-scope settings an editor sends
(``initializationOptions.userSettings`` / ``stitch/setUserSettings``) →
``[tool.stitch]`` in the workspace's ``pyproject.toml`` → initialization options →
``workspace/configuration`` (section ``stitch``) / ``didChangeConfiguration``.
Clients send camelCase (``nvccPath``); both spellings are accepted. Unknown keys
are ignored and reported once, never fatal. While the workspace is not trusted,
the layers a workspace can write are screened first (``workspace_trust``): they
cannot choose programs.
"""

from __future__ import annotations

import os
import re
import tomllib
from pathlib import Path
from typing import Any

import attrs
from attrs import define, field, frozen

from stitch_lsp.serde import converter
from stitch_lsp.workspace_trust import Ignored, screen


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
    # GEMMs: "auto" (the Triton GEMM family where it is faster: fp32 via 3xTF32, half precision with an epilogue
    # cuBLASLt cannot fuse), "triton" (every GEMM it can take), "cublas" (GEMMs stay on cuBLAS).
    gemm: str = "auto"
    # torch.compile's mode for the timing baseline: "default" or "max-autotune-no-cudagraphs".
    compile_mode: str = field(default="default",
                              validator=attrs.validators.in_(("default", "max-autotune-no-cudagraphs")))
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


# Settings whose keys are the user's own names (variables), not setting names: kept as written.
_VERBATIM = ("shapes",)


def _normalise(data: Any) -> Any:
    if isinstance(data, dict):
        out = {}
        for k, v in data.items():
            key = _snake(k) if isinstance(k, str) else k
            out[key] = v if key in _VERBATIM else _normalise(v)
        return out
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


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def from_pyproject(root: Path) -> dict[str, Any]:
    """The ``[tool.stitch]`` table of ``root/pyproject.toml`` (empty when absent or broken)."""
    tool = _read_toml(root / "pyproject.toml").get("tool", {})
    table = tool.get("stitch", {}) if isinstance(tool, dict) else {}
    return table if isinstance(table, dict) else {}


# -- the user's own config file --------------------------------------------------------------------
CONFIG_ENV = "STITCH_CONFIG"
TRUSTED_WORKSPACES_KEY = "trusted_workspaces"


def user_config_path() -> Path:
    """``$STITCH_CONFIG``, else ``$XDG_CONFIG_HOME/stitch/config.toml``, else ``~/.config/stitch/config.toml``."""
    explicit = os.environ.get(CONFIG_ENV)
    if explicit:
        return Path(os.path.expanduser(explicit))
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(base) / "stitch" / "config.toml"


def from_user_config() -> tuple[dict[str, Any], list[str]]:
    """(settings, trusted workspace folders) from the user's config file: top-level keys or a
    ``[stitch]`` table, the same keys as ``[tool.stitch]``, plus ``trustedWorkspaces = [...]``."""
    data = _read_toml(user_config_path())
    table = data.get("stitch", data)
    table = _normalise(table) if isinstance(table, dict) else {}
    folders = table.pop(TRUSTED_WORKSPACES_KEY, [])
    trusted = [os.path.expanduser(f) for f in folders if isinstance(f, str)] if isinstance(folders, list) else []
    return table, trusted


def in_trusted_folder(root: Path, folders: list[str]) -> bool:
    real = Path(os.path.realpath(root))
    for folder in folders:
        base = Path(os.path.realpath(folder))
        if real == base or base in real.parents:
            return True
    return False


# -- layers ----------------------------------------------------------------------------------------
@frozen
class Layer:
    """One source of settings. ``workspace``: files in the workspace can set its values."""

    name: str  # as the user knows it: "pyproject.toml", "workspace/configuration", ...
    raw: dict[str, Any]
    workspace: bool


@define
class Built:
    settings: Settings
    unknown: list[tuple[str, str]]  # (layer, key) ignored as unknown or ill-typed
    untrusted: list[Ignored]  # workspace values left out because the workspace is not trusted


def _unwrap(raw: Any) -> dict[str, Any]:
    if not isinstance(raw, dict):
        return {}
    data = _normalise(raw)
    inner = data.get("stitch")
    return inner if isinstance(inner, dict) else data


def build(layers: list[Layer], *, root: Path | None, trusted: bool) -> Built:
    """Merge ``layers`` in order over the defaults; while untrusted, workspace layers are screened.

    ``trusted`` is never read from a layer: it is the argument, and lands in the result."""
    settings = Settings()
    unknown: list[tuple[str, str]] = []
    untrusted: list[Ignored] = []
    for layer in layers:
        raw = dict(_unwrap(layer.raw))
        if "trusted" in raw:
            raw.pop("trusted")
            unknown.append((layer.name, "trusted (only the editor's workspace trust sets this)"))
        if layer.workspace and not trusted:
            raw, dropped = screen(raw, root, layer.name)
            untrusted += dropped
        settings, ignored = merge(settings, raw)
        unknown += [(layer.name, key) for key in ignored]
    return Built(settings.replace(trusted=trusted), unknown, untrusted)


def for_workspace(root: Path, *, trust: bool = False) -> Built:
    """Settings for a command run on ``root`` outside an editor: the user's config file, then the
    workspace's ``[tool.stitch]``, screened unless ``trust`` or the user's config trusts the folder."""
    user, folders = from_user_config()
    trusted = trust or in_trusted_folder(root, folders)
    layers = [Layer("your config", user, False), Layer("pyproject.toml", from_pyproject(root), True)]
    return build(layers, root=root, trusted=trusted)
