"""Settings trees an untrusted workspace could write — any nesting of `stitch`, any spelling, any
layer, bogus `$scopes` — pointing every program-naming setting (``PROGRAM_SETTINGS``) at marker
programs. No marker may run: not through the reader, not under ``stitch check``, not on save in the
server. (The reported hole: ``[tool.stitch.stitch.stitch] nvccPath = "./evil"`` ran on every one.)
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

from hypothesis import HealthCheck, given, settings as hsettings, strategies as st

from stitch_lsp.serde import to_dict
from stitch_lsp.settings import Layer, Settings, read_settings
from stitch_lsp.workspace_trust import PROGRAM_SETTINGS
from tests.lsp.harness import open_doc, running_server, server_env, server_info
from tests.security.attack import CLIENT_LAYERS, FILE_LAYER, plant_markers, pyproject_with, settings_tree
from tests.security.test_workspace_trust import KERNEL, save_and_wait, server_in, user_nvcc

DEFAULTS = Settings()


def _values(root: Path) -> dict:
    """The attack values, for a workspace at ``root`` (programs not created: the reader runs nothing)."""
    evil = root / "evil"
    return {
        "nvcc_path": str(evil / "nvcc"), "python": str(evil / "python"), "record_command": str(evil / "record"),
        "extra_env": {"PATH": str(evil)}, "extra_flags": ["-ccbin", str(evil / "cc"), "-Xcompiler", f"-B{evil}"],
    }


def _no_program_from(built, root: Path) -> None:
    s = built.settings
    assert s.nvcc_path == DEFAULTS.nvcc_path and s.python == DEFAULTS.python
    assert s.record_command == DEFAULTS.record_command and s.extra_env == {}
    assert str(root / "evil") not in repr(to_dict(s)), to_dict(s)


layers_drawn = st.lists(st.sampled_from([FILE_LAYER, *CLIENT_LAYERS]), min_size=1, max_size=3, unique=True)


@hsettings(max_examples=200, deadline=None)
@given(data=st.data(), names=layers_drawn)
def test_no_tree_in_any_layer_names_a_program_while_untrusted(data, names):
    root = Path("/ws")
    values = _values(root)
    layers = [Layer(n, data.draw(settings_tree(values, n), label=n), True, n != FILE_LAYER) for n in names]
    built = read_settings(layers, root=root, trusted=False)
    _no_program_from(built, root)
    assert built.untrusted or built.unknown, "the user is told what was left out"


@hsettings(max_examples=50, deadline=None)
@given(data=st.data(), name=st.sampled_from(sorted(PROGRAM_SETTINGS)), layer=st.sampled_from(CLIENT_LAYERS),
       scope=st.sampled_from(["user", "default", "remote"]))
def test_the_users_own_scope_is_kept_while_untrusted(data, name, layer, scope):
    """The client says the value is from the user's own settings: it is the user's."""
    values = _values(Path("/ws"))
    raw = {"stitch": {name: values[name], "$scopes": {name: scope}}}
    built = read_settings([Layer(layer, raw, True, True)], root=Path("/ws"), trusted=False)
    assert getattr(built.settings, name) == values[name]
    assert not built.untrusted


def test_scopes_in_a_file_are_not_believed():
    raw = {"nvccPath": "/ws/evil/nvcc", "$scopes": {"nvccPath": "user"}}
    built = read_settings([Layer(FILE_LAYER, raw, True)], root=Path("/ws"), trusted=False)
    assert built.settings.nvcc_path == "nvcc" and (FILE_LAYER, "$scopes") in built.unknown


def test_trusted_workspace_values_apply():
    """The screen is not a wall: once trusted, the same flat values are taken (so the tests above can fail)."""
    values = _values(Path("/ws"))
    built = read_settings([Layer(FILE_LAYER, dict(values), True)], root=Path("/ws"), trusted=True)
    assert built.settings.nvcc_path == values["nvcc_path"] and built.settings.extra_flags == values["extra_flags"]


def test_nested_stitch_is_an_unknown_key_in_a_file():
    built = read_settings([Layer(FILE_LAYER, {"stitch": {"stitch": {"nvccPath": "./evil"}}}, True)],
                          root=Path("/ws"), trusted=True)
    assert built.settings.nvcc_path == "nvcc" and built.unknown == [(FILE_LAYER, "stitch")]


# -- the CLI ------------------------------------------------------------------------------------------
def _cli(ws: Path, *args: str) -> subprocess.CompletedProcess:
    env = server_env({"STITCH_CONFIG": os.devnull, "XDG_CACHE_HOME": str(ws.parent / "cache")})
    return subprocess.run([sys.executable, "-m", "stitch_lsp.cli", *args], cwd=ws, env=env, capture_output=True,
                          text=True, timeout=120)


@hsettings(max_examples=5, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_stitch_check_runs_no_marker(tmp_path_factory, data):
    ws = tmp_path_factory.mktemp("ws")
    markers = ws.parent / f"{ws.name}-markers"
    values = plant_markers(ws, markers)
    (ws / "pyproject.toml").write_text(pyproject_with(data.draw(settings_tree(values, FILE_LAYER))))
    (ws / "k.cu").write_text(KERNEL)
    out = _cli(ws, "check", "k.cu")
    assert "Traceback" not in out.stderr and out.returncode in (0, 1), out.stderr
    assert "ignored" in out.stderr  # told
    assert not markers.exists(), markers.read_text()


def test_stitch_fuse_runs_no_marker_interpreter(tmp_path):
    """`python` nested in pyproject.toml would start fuse's tracing worker with the workspace's program."""
    markers = tmp_path.parent / f"{tmp_path.name}-markers"
    values = plant_markers(tmp_path, markers)
    (tmp_path / "pyproject.toml").write_text(
        f'[tool.stitch.stitch.stitch]\npython = "{values["python"]}"\nnvccPath = "{values["nvcc_path"]}"\n')
    (tmp_path / "m.py").write_text("import torch\n\n\ndef f(x):\n    y = torch.relu(x) * 2\n    return y\n\n\n"
                                   "def get_inputs():\n    return [torch.randn(8, 16)]\n")
    out = _cli(tmp_path, "fuse", "m.py:5-5", "--no-verify", "--no-record")
    assert "Traceback" not in out.stderr, out.stderr
    assert not markers.exists(), markers.read_text()


# -- the server ---------------------------------------------------------------------------------------
async def _server_attack(ws: Path, trees: dict) -> None:
    markers = ws.parent / f"{ws.name}-markers"
    argv_log = ws.parent / f"{ws.name}-nvcc-argv"
    (ws.parent / f"{ws.name}-user").mkdir()
    nvcc = user_nvcc(ws.parent / f"{ws.name}-user", argv_log)
    config = ws.parent / f"{ws.name}-config.toml"
    config.write_text(f'nvccPath = "{nvcc}"\n')
    if FILE_LAYER in trees:
        (ws / "pyproject.toml").write_text(pyproject_with(trees[FILE_LAYER]))
    (ws / "k.cu").write_text(KERNEL)
    options = {"trusted": False, **trees.get("initializationOptions", {})}
    async with running_server(ws, command=server_in(ws), initialization_options=options,
                              settings=trees.get("workspace/configuration", {}),
                              env={"STITCH_CONFIG": str(config)}) as client:
        uri = open_doc(client, ws / "k.cu")
        await save_and_wait(client, uri, argv_log)
        info = await server_info(client)
        assert info["settings"]["nvcc_path"] == str(nvcc)  # the user's own, from their config file
        assert info["settings"]["extra_env"] == {}
    assert not markers.exists(), markers.read_text()


@hsettings(max_examples=3, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data(), names=layers_drawn)
def test_server_runs_no_marker_on_save(tmp_path_factory, data, names):
    ws = tmp_path_factory.mktemp("ws")
    values = plant_markers(ws, ws.parent / f"{ws.name}-markers")
    trees = {n: data.draw(settings_tree(values, n), label=n) for n in names}
    asyncio.run(_server_attack(ws, trees))
