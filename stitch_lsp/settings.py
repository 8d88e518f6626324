"""Typed settings, read from every source by one function (``read_settings``).

Sources, later wins: defaults → the user's own config file
(``~/.config/stitch/config.toml``) → the user-scope settings an editor sends
(``initializationOptions.userSettings`` / ``stitch/setUserSettings``) →
``[tool.stitch]`` in the workspace's ``pyproject.toml`` → initialization options →
``workspace/configuration`` (section ``stitch``) / ``didChangeConfiguration``.

Each layer is first flattened to setting names (``flatten``: camelCase, snake_case
and any case are one name; a nested ``stitch`` table is an unknown key, dropped and
reported like every other). Only then, while the workspace is not trusted, are the
layers a workspace can write screened (``workspace_trust.screen``), so no nesting,
spelling or layering gets a program past the screen; then numbers are range-checked
and clamped, each with a message.
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
from stitch_lsp.workspace_trust import Ignored, camel, screen


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
    # The command `stitch record` runs to see the shapes of the user's program (issue 31).
    record_command: str = ""
    # Environment variables added for the programs Stitch starts (nvcc, workers, ...), besides the
    # allowlisted ones it passes on (child_env): the user's own, never a workspace's while untrusted.
    extra_env: dict[str, str] = field(factory=dict)

    def replace(self, **changes: Any) -> "Settings":
        return attrs.evolve(self, **changes)


# -- reading: every source goes through read_settings ----------------------------------------------
_CAMEL = re.compile(r"(?<!^)(?=[A-Z])")


def _snake(key: str) -> str:
    return _CAMEL.sub("_", key).lower()


def _folded(key: str) -> str:
    """A key as compared: case, `_` and `-` do not count (nvccPath, nvcc_path, NVCC-PATH are one)."""
    return re.sub(r"[_\-\s]", "", key).lower()


_FIELDS = {f.name: f for f in attrs.fields(Settings)}
_BY_FOLDED = {_folded(name): name for name in _FIELDS}
_ON_SAVE_BY_FOLDED = {_folded(f.name): f.name for f in attrs.fields(OnSave)}
_PAIR_BY_FOLDED = {_folded(f.name): f.name for f in attrs.fields(KernelPair)}
# The client's own key inside the `stitch` object it sends: where VS Code says each value came from.
SCOPES_KEY = "$scopes"
# Scopes that are the user's own settings (kept even while the workspace is untrusted).
USER_SCOPES = frozenset({"default", "user", "remote"})
WORKSPACE_SCOPES = frozenset({"workspace", "workspaceFolder"})

# Numbers a user can set, with the range they are clamped to (out of range: a message says so).
NUMBER_RANGES: dict[str, tuple[float, float]] = {
    "compile_timeout_s": (1.0, 3600.0),
    "verify_timeout_s": (1.0, 86_400.0),
    "profile_timeout_s": (1.0, 86_400.0),
    "gpu_index": (0, 1023),
    "rounds": (1, 50),
    "candidates_per_round": (1, 64),
    "token_budget": (1_000, 100_000_000),
    "target_speedup": (0.1, 1000.0),
    "cache_max_mb": (0, 1_000_000),
    "diagnostics_debounce_ms": (0, 10_000),
}


@frozen
class Layer:
    """One source of settings, in merge order.

    ``workspace``: files in the workspace can set its values (screened while untrusted).
    ``client``: it comes from the editor (initializationOptions, workspace/configuration,
    didChangeConfiguration, userSettings): it may wrap its values in one ``stitch`` object and
    carry ``$scopes``; a file layer (pyproject.toml, config.toml) may do neither."""

    name: str  # as the user knows it: "pyproject.toml", "workspace/configuration", ...
    raw: Any
    workspace: bool
    client: bool = False


@frozen
class Flat:
    """One layer's values as ``Settings`` field names, before screening and checking."""

    values: dict[str, Any]
    scopes: dict[str, str]  # field -> the client's scope for it (client layers only)
    unknown: list[str]  # keys dropped, as written (with the path to them for nested ones)


def _key_path(parts: list[str]) -> str:
    return ".".join(parts)


def flatten(raw: Any, *, client: bool = False) -> Flat:
    """A layer's raw tree as ``{field: value}``: spellings folded (camelCase, snake_case, any case),
    dotted keys (``onSave.compile``) opened, and everything that is not a setting dropped and named,
    nested ``stitch`` tables included (only a client may wrap its object in one ``stitch``)."""
    values: dict[str, Any] = {}
    scopes: dict[str, str] = {}
    unknown: list[str] = []
    if not isinstance(raw, dict):
        return Flat(values, scopes, [] if raw in (None, {}) else ["(not a table of settings)"])
    data: dict[Any, Any] = dict(raw)
    if client:
        wrapped = [k for k in data if isinstance(k, str) and _folded(k) == "stitch" and isinstance(data[k], dict)]
        if len(wrapped) == 1 and all(k in wrapped or k == SCOPES_KEY for k in data):
            outer_scopes = data.get(SCOPES_KEY)
            data = dict(data[wrapped[0]])
            if outer_scopes is not None and SCOPES_KEY not in data:
                data[SCOPES_KEY] = outer_scopes
        raw_scopes = data.pop(SCOPES_KEY, None)
        if isinstance(raw_scopes, dict):
            for name, scope in raw_scopes.items():
                if not isinstance(name, str) or not isinstance(scope, str):
                    continue
                head = name.split(".")
                if len(head) > 1 and _folded(head[0]) == "stitch":
                    head = head[1:]
                field_name = _BY_FOLDED.get(_folded(head[0])) if head else None
                if field_name is not None:
                    scopes[field_name] = scope
        elif raw_scopes is not None:
            unknown.append(SCOPES_KEY)
    for key, value in data.items():
        if not isinstance(key, str):
            unknown.append(repr(key))
            continue
        parts = key.split(".")
        if client and len(parts) > 1 and _folded(parts[0]) == "stitch":
            parts = parts[1:]  # "stitch.nvccPath": VS Code's full name of a setting
        name = _BY_FOLDED.get(_folded(parts[0]))
        if name is None or name == "trusted":
            unknown.append(key if name is None else f"{key} (only the editor's workspace trust sets this)")
            continue
        if name == "on_save":
            sub = value if len(parts) == 1 else {".".join(parts[1:]): value}
            if not isinstance(sub, dict):
                unknown.append(key)
                continue
            merged = dict(values.get("on_save", {}))
            for sub_key, sub_value in sub.items():
                field_name = _ON_SAVE_BY_FOLDED.get(_folded(sub_key)) if isinstance(sub_key, str) else None
                if field_name is None:
                    unknown.append(f"{key}.{sub_key}")
                else:
                    merged[field_name] = sub_value
            values["on_save"] = merged
            continue
        if len(parts) > 1:
            unknown.append(key)
            continue
        if name == "pair" and isinstance(value, list):
            value = [{_PAIR_BY_FOLDED.get(_folded(k), k): v for k, v in e.items() if isinstance(k, str)}
                     if isinstance(e, dict) else e for e in value]
        values[name] = value  # shapes: the user's own variable names, kept as written
    return Flat(values, scopes, unknown)


def _number(key: str, value: Any, source: str) -> tuple[Any, str]:
    """(the value to use, a message) for a numeric setting: in range, or clamped and said."""
    low, high = NUMBER_RANGES[key]
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return value, ""  # not a number: the type check reports it
    integral = _FIELDS[key].type in (int, "int")
    if value != value:  # NaN
        return None, f"{camel(key)} = nan (from {source}) is not a number: the default applies"
    clamped = min(max(value, low), high)
    if integral:
        clamped = int(clamped)
    if clamped != value:
        return clamped, (f"{camel(key)} = {value:g} (from {source}) is out of range "
                         f"({low:g} to {high:g}): {clamped:g} is used")
    return value, ""


def _apply(current: dict[str, Any], values: dict[str, Any], source: str,
           problems: list[str], unknown: list[tuple[str, str]]) -> dict[str, Any]:
    for key, value in values.items():
        if value is None:
            continue
        if key in NUMBER_RANGES:
            value, said = _number(key, value, source)
            if said:
                problems.append(said)
            if value is None:
                continue
        if key == "on_save" and isinstance(value, dict):
            value = {**current["on_save"], **value}
        trial = {**current, key: value}
        try:
            converter.structure(trial, Settings)
        except Exception:
            unknown.append((source, f"{camel(key)} (a value of the wrong type: {str(value)[:60]})"))
            continue
        current = trial
    return current


@define
class Built:
    """What ``read_settings`` made of the layers."""

    settings: Settings
    unknown: list[tuple[str, str]]  # (layer, key): dropped as unknown or ill-typed; tell the user once
    untrusted: list[Ignored]  # values dropped because the workspace is not trusted, each with its origin
    problems: list[str] = field(factory=list)  # numbers out of range, clamped: one line each

    def messages(self) -> list[str]:
        """Everything the user should be told, one line each (untrusted values are told apart)."""
        return [*self.problems, *(f"ignored setting '{key}' from {layer}" for layer, key in self.unknown)]


def read_settings(layers: list[Layer], *, root: Path | None, trusted: bool) -> Built:
    """The one reader: every layer is flattened to setting names first, then, while the workspace is
    not trusted, a workspace layer's values are screened (``workspace_trust.screen``), and only then
    merged in order over the defaults, with types and number ranges checked.

    A client layer's ``$scopes`` marks values the user set in their own (user, remote, default)
    settings: those are the user's, never screened. ``trusted`` is never read from a layer."""
    current = converter.unstructure(Settings())
    unknown: list[tuple[str, str]] = []
    untrusted: list[Ignored] = []
    problems: list[str] = []
    for layer in layers:
        flat = flatten(layer.raw, client=layer.client)
        unknown += [(layer.name, key) for key in flat.unknown]
        values = flat.values
        if layer.workspace and not trusted:
            users = {k: v for k, v in values.items() if flat.scopes.get(k) in USER_SCOPES}
            rest = {k: v for k, v in values.items() if k not in users}
            by_origin: dict[str, dict[str, Any]] = {}
            for key, value in rest.items():
                scope = flat.scopes.get(key)
                origin = f"{layer.name}, {scope} settings" if scope else layer.name
                by_origin.setdefault(origin, {})[key] = value
            values = dict(users)
            for origin, part in by_origin.items():
                kept, dropped = screen(part, root, origin)
                values.update(kept)
                untrusted += dropped
        current = _apply(current, values, layer.name, problems, unknown)
    settings = converter.structure(current, Settings).replace(trusted=trusted)
    return Built(settings, unknown, untrusted, problems)


def with_overrides(settings: Settings, overrides: dict[str, Any], source: str = "the command line") -> Built:
    """``settings`` with values the user gave directly (command-line flags), checked like any layer."""
    current = _apply(converter.unstructure(settings), {k: v for k, v in overrides.items() if k in _FIELDS},
                     source, problems := [], unknown := [])
    return Built(converter.structure(current, Settings), unknown, [], problems)

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
    table = dict(data["stitch"] if isinstance(data.get("stitch"), dict) else data)
    folders: Any = []
    for key in list(table):
        if isinstance(key, str) and _folded(key) == _folded(TRUSTED_WORKSPACES_KEY):
            folders = table.pop(key)
    trusted = [os.path.expanduser(f) for f in folders if isinstance(f, str)] if isinstance(folders, list) else []
    return table, trusted


def in_trusted_folder(root: Path, folders: list[str]) -> bool:
    real = Path(os.path.realpath(root))
    for folder in folders:
        base = Path(os.path.realpath(folder))
        if real == base or base in real.parents:
            return True
    return False


def for_workspace(root: Path, *, trust: bool = False) -> Built:
    """Settings for a command run on ``root`` outside an editor: the user's config file, then the
    workspace's ``[tool.stitch]``, screened unless ``trust`` or the user's config trusts the folder."""
    user, folders = from_user_config()
    trusted = trust or in_trusted_folder(root, folders)
    layers = [Layer("your config", user, False), Layer("pyproject.toml", from_pyproject(root), True)]
    return read_settings(layers, root=root, trusted=trusted)
