"""The attacker's toolkit: marker programs, settings trees that point every program-naming setting
at them, and a small TOML writer, shared by the security tests."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hypothesis import strategies as st

from stitch_lsp.workspace_trust import PROGRAM_SETTINGS, camel

# The workspace layers and what each may carry.
FILE_LAYER = "pyproject.toml"
CLIENT_LAYERS = ("initializationOptions", "workspace/configuration")


def marker_program(path: Path, markers: Path) -> Path:
    """A program that leaves a line in ``markers`` if anything ever runs it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!/bin/sh\necho {path.name} \"$@\" >> {markers}\necho 'release 13.0, V13.0.88'\nexit 1\n")
    path.chmod(0o755)
    return path


def plant_markers(ws: Path, markers: Path) -> dict[str, Any]:
    """Marker programs in the workspace, and a value for every program-naming setting that would run
    one of them: the attack for each entry of ``PROGRAM_SETTINGS``."""
    evil = ws / "evil"
    for name in ("nvcc", "python", "python3", "cc", "record", "gcc", "g++"):
        marker_program(evil / name, markers)
    values = {
        "nvcc_path": str(evil / "nvcc"),
        "python": str(evil / "python"),
        "record_command": str(evil / "record"),
        "extra_env": {"PATH": str(evil), "LD_PRELOAD": str(evil / "cc"), "CUDA_HOME": str(ws)},
        "extra_flags": ["-O3", "-ccbin", str(evil / "cc"), "-Xcompiler", f"-B{evil}", f"--compiler-bindir={evil}"],
    }
    assert set(values) == set(PROGRAM_SETTINGS), "a program-naming setting without an attack here"
    return values


def spellings(key: str) -> st.SearchStrategy[str]:
    """The ways a reader might be fooled into a second name for one setting."""
    c = camel(key)
    return st.sampled_from([key, c, key.upper(), c.upper(), c[0].upper() + c[1:], key.replace("_", "-"),
                            c.lower()])


@st.composite
def settings_tree(draw, values: dict[str, Any], layer: str) -> dict[str, Any]:
    """A tree carrying some of ``values`` under random spellings, nesting and (bogus) scopes."""
    chosen = draw(st.lists(st.sampled_from(sorted(values)), min_size=1, unique=True))
    flat: dict[str, Any] = {}
    for key in chosen:
        name = draw(spellings(key))
        if layer != FILE_LAYER and draw(st.booleans()):
            name = "stitch." + name  # VS Code's full name of a setting
        flat[name] = values[key]
    if draw(st.booleans()):
        # A scope the workspace wrote itself: in a file it is an unknown key; from a client, a
        # workspace scope is screened like no scope at all.
        scope = draw(st.sampled_from(["workspace", "workspaceFolder"] if layer != FILE_LAYER
                                     else ["user", "default", "workspace"]))
        flat["$scopes"] = {camel(k): scope for k in chosen}
    tree: dict[str, Any] = flat
    for _ in range(draw(st.integers(0, 3))):
        tree = {draw(st.sampled_from(["stitch", "Stitch", "STITCH"])): tree}
    return tree


def toml_value(value: Any) -> str:
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{json.dumps(str(k))} = {toml_value(v)}" for k, v in value.items()) + " }"
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    return json.dumps(str(value))


def pyproject_with(table: dict[str, Any]) -> str:
    """``[tool.stitch]`` holding ``table`` (nested tables as inline tables, keys quoted)."""
    lines = ["[tool.stitch]"]
    lines += [f"{json.dumps(str(k))} = {toml_value(v)}" for k, v in table.items()]
    return "\n".join(lines) + "\n"
