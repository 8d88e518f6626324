"""Which settings a workspace may choose for itself while it is not trusted.

A cloned repository is not the user. While the editor (or, on the command line,
``--trust-workspace``) has not trusted it, values that come from the workspace —
``[tool.stitch]`` in its ``pyproject.toml``, and whatever an editor merges from
workspace-level settings files — may not name a program to run, hand options to
another program that can load code, or point outside the workspace. Those values
are dropped here, each with the reason, and the user's own values (or the
defaults) stay in force. Everything else a workspace may set. ``docs/security.md``
has the table and the reasoning; ``CLASSIFICATION`` is the one list, and a test
fails when a setting is added without a place in it.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Callable, Iterable

from attrs import frozen

from stitch_lsp.nvcc_options import takes_value

# How a workspace's value of each setting is treated while untrusted.
SAFE = "safe"  # taken as it is
USER_ONLY = "user-only"  # never taken from the workspace
CHECKED = "checked"  # taken where the value passes a check (below), else dropped

# Every setting that names a program to run, or can make one run (flags that choose the host
# compiler, environment variables such as PATH or LD_PRELOAD). The screen and the tests read this
# one list: a setting added here is screened and attacked by tests/security at once.
PROGRAM_SETTINGS: tuple[str, ...] = ("nvcc_path", "python", "record_command", "extra_env", "extra_flags")

CLASSIFICATION: dict[str, tuple[str, str]] = {
    "nvcc_path": (USER_ONLY, "names the compiler program that runs on every save"),
    "python": (USER_ONLY, "names the interpreter that runs workers and the shape recorder"),
    "record_command": (USER_ONLY, "names the program `stitch record` runs"),
    "extra_env": (USER_ONLY, "environment variables for the programs Stitch starts (PATH, LD_PRELOAD and "
                             "the like choose which code runs)"),
    "extra_flags": (CHECKED, "flags that pick programs (-ccbin), pass options to them (-Xcompiler -fplugin=...), "
                             "run what was built (-run), read more flags (--options-file) or write files "
                             "(-o, -MF, --keep-dir) are dropped; a list of known-harmless flags stays"),
    "include_paths": (CHECKED, "directories outside the workspace are dropped"),
    "kernels_dir": (CHECKED, "a folder outside the workspace is dropped"),
    "pair": (CHECKED, "pairs whose kernel, reference or binding lie outside the workspace are dropped; the rest "
                      "give static pairing checks only, since nothing is imported or run until the workspace is "
                      "trusted"),
    "arch": (CHECKED, "anything but a GPU architecture name (sm_90, compute_90, 9.0, native) is dropped"),
    "compile_timeout_s": (SAFE, "a number"),
    "verify_timeout_s": (SAFE, "a number"),
    "profile_timeout_s": (SAFE, "a number"),
    "gpu_index": (SAFE, "a number"),
    "on_save": (SAFE, "switches; verify / profile / sanitize act only in a trusted workspace"),
    "coder": (SAFE, "a choice between built-in Coders; fusing runs only in a trusted workspace"),
    "model": (SAFE, "a model name sent to the API the user configured; fusing runs only in a trusted workspace"),
    "rounds": (SAFE, "a number"),
    "candidates_per_round": (SAFE, "a number"),
    "gemm": (SAFE, "a choice between built-in GEMM paths"),
    "compile_mode": (SAFE, "a choice between torch.compile modes for the timing baseline"),
    "token_budget": (SAFE, "a number"),
    "target_speedup": (SAFE, "a number"),
    "judge": (SAFE, "a switch"),
    "shapes": (SAFE, "shape strings, parsed, never run"),
    "cache_max_mb": (SAFE, "a number"),
    "diagnostics_debounce_ms": (SAFE, "a number"),
    # Never from any settings layer: only the client (or the CLI flag) sets it.
    "trusted": (USER_ONLY, "only the editor's workspace trust sets this"),
}


@frozen
class Ignored:
    """A workspace value left out while the workspace is untrusted."""

    key: str  # the setting, snake_case
    value: str  # what was dropped, as the user wrote it
    source: str  # "pyproject.toml", "workspace/configuration", ...
    reason: str

    def describe(self) -> str:
        return f"{camel(self.key)} = {self.value} (from {self.source}): {self.reason}"


# Why, in a few words, for the one message the user sees (the log has each value's reason).
SHORT_REASONS = {
    "nvcc_path": "names a program",
    "python": "names a program",
    "record_command": "names a program",
    "extra_env": "environment for programs",
    "extra_flags": "flags that choose, drive or load programs, or write files",
    "include_paths": "outside the workspace",
    "kernels_dir": "outside the workspace",
    "pair": "files outside the workspace",
    "arch": "not a GPU architecture",
    "trusted": "only the editor's trust sets it",
}


def summary(ignored: list[Ignored]) -> str:
    """One line per source: ``pyproject.toml: nvccPath ./evil.sh (names a program); ...``."""
    by_source: dict[str, dict[str, list[str]]] = {}
    for item in ignored:
        by_source.setdefault(item.source, {}).setdefault(item.key, []).append(item.value)
    parts = []
    for source, keys in by_source.items():
        said = "; ".join(
            f"{camel(k)} {', '.join(v[:4])}{', ...' if len(v) > 4 else ''} ({SHORT_REASONS.get(k, 'not allowed')})"
            for k, v in keys.items()
        )
        parts.append(f"from {source}: {said}")
    return " — ".join(parts)


def camel(key: str) -> str:
    head, *rest = key.split("_")
    return head + "".join(p.title() for p in rest)


# -- nvcc flags --------------------------------------------------------------------------------
# Flags a workspace may pass to nvcc: they change what is compiled, how, and what is
# reported, and never which program runs or which file is read or written.
_SAFE_FLAG_PATTERNS = [re.compile(p) for p in (
    r"-O[0-3s]?", r"--optimize=[0-3]", r"-dopt=(on|off)", r"--dopt=(on|off)",
    r"-lineinfo", r"--generate-line-info", r"-G", r"--device-debug", r"-g", r"--debug",
    r"-{1,2}use_fast_math", r"-w", r"--disable-warnings", r"-res-usage", r"--resource-usage",
    r"-{1,2}expt-relaxed-constexpr", r"-{1,2}expt-extended-lambda", r"-{1,2}extended-lambda",
    r"-{1,2}restrict", r"-src-in-ptx", r"--source-in-ptx", r"-{1,2}extra-device-vectorization",
    r"-rdc=(true|false)", r"--relocatable-device-code=(true|false)", r"-dc", r"-dw", r"-dlto", r"-lto",
    r"-{1,2}W(no-)?[\w-]+", r"-{1,2}Werror=[a-z][\w,-]*", r"-err-no", r"--display-error-number",
    r"-{1,2}std=c\+\+\d\d", r"-D[A-Za-z_]\w*(=[^\s]*)?", r"-U[A-Za-z_]\w*",
    r"-{1,2}(arch|gpu-architecture|code|gpu-code)=[\w,.]+",
    r"-gencode=arch=[\w,.]+", r"--generate-code=arch=[\w,.]+", r"-gencode=[\w,.=\[\]]+",
    r"-{1,2}maxrregcount=\d+", r"-{1,2}(ftz|prec-div|prec-sqrt|fmad)=(true|false)",
    r"-{1,2}diag-(suppress|warn|error)=[\w,]+", r"-t=?\d+", r"--threads=\d+", r"-{1,2}default-stream=(legacy|null|per-thread)",
)]
# ptxas options (after -Xptxas) that only report or tune.
_SAFE_PTXAS = [re.compile(p) for p in (
    r"-v", r"--verbose", r"-O[0-3]", r"--opt-level=[0-3]", r"-{1,2}warn-spills", r"--warn-on-spills",
    r"-{1,2}warn-lmem-usage", r"--warn-on-local-memory-usage", r"-{1,2}warn-double-usage",
    r"--warn-on-double-precision-use", r"--allow-expensive-optimizations(=(true|false))?",
    r"-{1,2}(dlcm|dscm)=\w+", r"--def-load-cache=\w+", r"--def-store-cache=\w+",
    r"-{1,2}maxrregcount=\d+", r"-{1,2}Werror",
)]
_REASONS = [
    (("-ccbin", "--compiler-bindir"), "chooses the host compiler program"),
    (("-Xcompiler", "--compiler-options", "-Xlinker", "--linker-options", "-Xnvlink", "--nvlink-options",
      "-Xarchive", "--archive-options", "-Xcudafe", "-Xfatbin", "--fatbin-options"),
     "passes options to another program, which can load code (-fplugin=..., -B..., -wrapper)"),
    (("-Xptxas", "--ptxas-options"), "passes options to ptxas beyond the reporting and tuning ones"),
    (("-run", "--run", "--run-args", "-run-args"), "runs the program it builds"),
    (("-optf", "--options-file"), "reads more flags from a file"),
    (("-o", "--output-file", "-odir", "--output-directory", "-MF", "--dependency-output", "--keep-dir",
      "-keep", "--keep", "-save-temps", "-M", "-MD", "-MMD"), "writes files where the workspace says"),
    (("-I", "--include-path", "-isystem", "--system-include", "-include", "--pre-include"),
     "reads files from outside the workspace"),
    (("-l", "--library", "-L", "--library-path"), "links code from a library"),
]


def _flag_name(flag: str) -> str:
    return flag.split("=", 1)[0]


def _reason_for(flag: str) -> str:
    name = _flag_name(flag)
    for names, reason in _REASONS:
        if name in names:
            return reason
    return "not on the list of flags a workspace may set while untrusted"


def _ptxas_safe(value: str) -> bool:
    return all(any(p.fullmatch(item.strip()) for p in _SAFE_PTXAS) for item in value.split(",") if item.strip())


def _flag_safe(flag: str, value: str | None, inside: Callable[[str], bool]) -> bool:
    name = _flag_name(flag)
    joined = flag if value is None else f"{flag}={value}"
    if name in ("-Xptxas", "--ptxas-options"):
        attached = value if value is not None else (flag.split("=", 1)[1] if "=" in flag else "")
        return bool(attached) and _ptxas_safe(attached)
    if name in ("-I", "--include-path") or (flag.startswith("-I") and len(flag) > 2 and value is None):
        path = value if value is not None else (flag.split("=", 1)[1] if "=" in flag else flag[2:])
        return inside(path)
    if flag in ("-D", "--define-macro", "-U", "--undefine-macro") and value is not None:
        return bool(re.fullmatch(r"[A-Za-z_]\w*(=[^\s]*)?", value))
    if flag in ("-std", "--std") and value is not None:
        return bool(re.fullmatch(r"c\+\+\d\d", value))
    return any(p.fullmatch(joined) for p in _SAFE_FLAG_PATTERNS)


def screen_flags(flags: Iterable[Any], inside: Callable[[str], bool]) -> tuple[list[str], list[tuple[str, str]]]:
    """Split nvcc flags into (kept, [(dropped flag with its value, reason)])."""
    items = [str(f) for f in flags]
    kept: list[str] = []
    dropped: list[tuple[str, str]] = []
    i = 0
    while i < len(items):
        flag = items[i]
        value = None
        # Split the list as nvcc does: an option that takes a value and has none attached takes the
        # next item, whatever it looks like (`-Werror -O3` is -Werror=-O3 to nvcc).
        if "=" not in flag and takes_value(flag) and i + 1 < len(items):
            value = items[i + 1]
        group = [flag] if value is None else [flag, value]
        if _flag_safe(flag, value, inside):
            kept += group
        else:
            dropped.append((" ".join(group), _reason_for(flag)))
        i += len(group)
    return kept, dropped


# -- paths ------------------------------------------------------------------------------------------
def inside_workspace(root: Path | None) -> Callable[[str], bool]:
    """A test: does a path (relative to ``root``, ``~`` expanded, symlinks followed) stay inside ``root``?"""
    if root is None:
        return lambda _path: False
    real_root = Path(os.path.realpath(root))

    def inside(path: str) -> bool:
        if not isinstance(path, str) or not path.strip() or "\0" in path:
            return False
        candidate = Path(os.path.expanduser(path))
        if not candidate.is_absolute():
            candidate = real_root / candidate
        real = Path(os.path.realpath(candidate))
        return real == real_root or real_root in real.parents

    return inside


_ARCH = re.compile(r"(sm|compute|lto)_\d+[af]?|\d+(\.\d+)?[af]?|native|all|all-major")


def _pair_paths(entry: Any) -> list[str]:
    if not isinstance(entry, dict):
        return []
    kernel = str(entry.get("kernel", "")).rsplit(":", 1)[0]
    return [p for p in (kernel, entry.get("reference"), entry.get("binding")) if isinstance(p, str) and p]


def screen(raw: dict[str, Any], root: Path | None, source: str) -> tuple[dict[str, Any], list[Ignored]]:
    """What an untrusted workspace's layer ``raw`` (snake_case keys) may set, and what it may not."""
    inside = inside_workspace(root)
    kept: dict[str, Any] = {}
    ignored: list[Ignored] = []

    def drop(key: str, value: Any, reason: str) -> None:
        shown = value if isinstance(value, str) else repr(value)
        ignored.append(Ignored(key, shown if len(shown) <= 160 else shown[:157] + "...", source, reason))

    for key, value in raw.items():
        # A key without a place in the list is not a setting anyone reviewed: never taken.
        kind, reason = CLASSIFICATION.get(key, (USER_ONLY, "not a setting a workspace may set"))
        if kind == SAFE or value is None:
            kept[key] = value
        elif kind == USER_ONLY:
            drop(key, value, reason)
        elif key == "extra_flags" and isinstance(value, list):
            flags, dropped = screen_flags(value, inside)
            kept[key] = flags
            for flag, why in dropped:
                drop(key, flag, why)
        elif key == "include_paths" and isinstance(value, list):
            kept[key] = [p for p in value if inside(p)]
            for p in value:
                if not inside(p):
                    drop(key, p, "a directory outside the workspace")
        elif key == "kernels_dir" and isinstance(value, str):
            if inside(value):
                kept[key] = value
            else:
                drop(key, value, "a folder outside the workspace")
        elif key == "pair" and isinstance(value, list):
            good = [e for e in value if all(inside(p) for p in _pair_paths(e))]
            kept[key] = good
            for e in value:
                if e not in good:
                    drop(key, e, "names a file outside the workspace")
        elif key == "arch" and isinstance(value, str):
            if not value.strip() or _ARCH.fullmatch(value.strip()):
                kept[key] = value
            else:
                drop(key, value, "not a GPU architecture name")
        else:
            drop(key, value, "not a value of the kind this setting takes")
    return kept, ignored
