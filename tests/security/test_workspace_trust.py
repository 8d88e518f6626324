"""Workspace trust against the workspace's own settings, through the real server.

An untrusted workspace may not choose which programs run: a program it names in
``[tool.stitch]``, in the editor's merged settings or in initializationOptions
is never started. Each "evil" program here writes a marker when run; every test
asserts that no marker appears, that compiles still happen with the user's own
nvcc (a recording stand-in), and that the user is told once what was ignored.
"""

from __future__ import annotations

import asyncio
import json
import sys
import textwrap
from pathlib import Path

from lsprotocol import types as lsp

from tests.lsp.harness import open_doc, running_server, save_doc, server_info, wait_until
from tests.lsp.test_settings_and_isolation import wait_until_info

KERNEL = textwrap.dedent(
    """\
    __global__ void scale(float* y, const float* x, float a, int n) {
        int i = blockIdx.x * blockDim.x + threadIdx.x;
        if (i < n) y[i] = a * x[i];
    }
    """
)


def evil_program(folder: Path, name: str, markers: Path) -> Path:
    """A program that, if anything ever runs it, leaves a marker (and a ptxas-like line, to look plausible)."""
    path = folder / name
    path.write_text(f"#!/bin/sh\necho {name} \"$@\" >> {markers}\necho 'release 13.0, V13.0.88'\n")
    path.chmod(0o755)
    return path


def user_nvcc(folder: Path, argv_log: Path) -> Path:
    """The user's own nvcc: records its argv; like real nvcc it runs the host compiler -ccbin names."""
    path = folder / "user-nvcc"
    path.write_text(
        "#!/bin/sh\n"
        f"printf '%s\\n' \"$*\" >> {argv_log}\n"
        "prev=''\n"
        "for a in \"$@\"; do\n"
        "  if [ \"$prev\" = -ccbin ] || [ \"$prev\" = --compiler-bindir ]; then \"$a\" --version; fi\n"
        "  case \"$a\" in -ccbin=*|--compiler-bindir=*) \"${a#*=}\" --version ;; esac\n"
        "  prev=\"$a\"\n"
        "done\n"
        "echo 'ptxas info    : Compiling entry function '\"'\"'_Z5scalePfPKffi'\"'\"' for '\"'\"'sm_90'\"'\"'' >&2\n"
        "echo 'ptxas info    : Used 8 registers, 380 bytes cmem[0]' >&2\n"
        "exit 0\n"
    )
    path.chmod(0o755)
    return path


def server_in(folder: Path) -> list[str]:
    """The server started in the workspace folder, as VS Code starts it (so ./relative paths resolve there)."""
    launcher = f"import os, sys\nos.chdir({str(folder)!r})\nfrom stitch_lsp.lsp.main import main\nsys.exit(main())\n"
    return [sys.executable, "-c", launcher]


async def save_and_wait(client, uri: str, argv_log: Path | None, timeout: float = 30.0) -> None:
    save_doc(client, uri)
    if argv_log is not None:
        await wait_until(lambda: argv_log.exists() and argv_log.read_text().strip(), timeout, "the user's nvcc to run")
    await server_info(client)  # also asks nvcc --version: another way a named program could start
    await asyncio.sleep(0.3)


async def test_pyproject_nvcc_path_is_not_run_in_an_untrusted_workspace(tmp_path):
    """The reported hole: ``nvccPath = "./evil.sh"`` in pyproject.toml ran on save."""
    markers = tmp_path.parent / f"{tmp_path.name}-markers"
    evil_program(tmp_path, "evil.sh", markers)
    (tmp_path / "pyproject.toml").write_text('[tool.stitch]\nnvccPath = "./evil.sh"\n')
    (tmp_path / "k.cu").write_text(KERNEL)
    async with running_server(tmp_path, command=server_in(tmp_path),
                              initialization_options={"trusted": False}) as client:
        uri = open_doc(client, tmp_path / "k.cu")
        await save_and_wait(client, uri, None)
        info = await server_info(client)
        assert info["settings"]["nvcc_path"] == "nvcc"
        warned = [m.message for m in client.messages if "nvccPath" in m.message]
        assert len(warned) == 1 and "not trusted" in warned[0] and "pyproject.toml" in warned[0]
        assert any("nvccPath" in m.message for m in client.log_messages)
    assert not markers.exists(), markers.read_text()


# Every setting that could make an untrusted workspace run a program, or read outside itself.
def workspace_settings(root: Path) -> dict:
    return {
        "nvccPath": "./evil-nvcc",  # relative to the server's folder, as in the report
        "python": str(root / "evil-python"),
        "extraFlags": ["-O3", "-ccbin", str(root / "evil-cc"), "-Xcompiler", "-fplugin=./evil.so",
                       "--options-file", "flags.txt", "-run", "-o", "/tmp/stitch-evil.o", "-DSAFE_MACRO=1",
                       "-Xptxas", "-v"],
        "includePaths": ["inc", "/usr/include/evil"],
        "kernelsDir": "../outside",
        "pair": [{"kernel": "k.cu:scale", "reference": "../../evil_ref.py"}],
    }
PAIRED_KERNEL = "// stitch: reference=ref.py launch=\"grid=1 block=32 args=y,x,2.0,n\"\n" + KERNEL
REFERENCE = (
    "import pathlib\npathlib.Path({marker!r}).write_text('reference imported')\n"
    "import torch\nclass Model(torch.nn.Module):\n    def forward(self, x):\n        return x * 2\n"
    "def get_inputs():\n    return [torch.randn(32)]\ndef get_init_inputs():\n    return []\n"
)


def hostile_workspace(root: Path, markers: Path, source: str) -> dict:
    """A workspace whose settings (from ``source``) name programs; returns what to send as initialization."""
    for name in ("evil-nvcc", "evil-python", "evil-cc"):
        evil_program(root, name, markers)
    (root / "inc").mkdir()
    (root / "k.cu").write_text(PAIRED_KERNEL)
    (root / "ref.py").write_text(REFERENCE.format(marker=str(markers)))
    (root / "flags.txt").write_text("-ccbin ./evil-cc\n")
    if source == "pyproject.toml":
        lines = ["[tool.stitch]"] + [f"{k} = {json.dumps(v)}" for k, v in workspace_settings(root).items() if k != "pair"]
        lines += ["[[tool.stitch.pair]]", 'kernel = "k.cu:scale"', 'reference = "../../evil_ref.py"']
        (root / "pyproject.toml").write_text("\n".join(lines) + "\n")
        return {}
    if source == "initializationOptions":
        return {"initialization_options": {"trusted": False, "settings": workspace_settings(root)}}
    return {"settings": workspace_settings(root)}  # what an editor answers to workspace/configuration, merged


async def exercise(client, root: Path) -> str:
    """Everything that could start a program: save (compile, verify), serverInfo, verify command, fuse."""
    uri = open_doc(client, root / "k.cu")
    save_doc(client, uri)
    await client.workspace_execute_command_async(
        lsp.ExecuteCommandParams(command="stitch.verifyKernel", arguments=[uri, {"line": 1, "character": 17}]))
    return uri


async def test_no_program_named_by_an_untrusted_workspace_runs(tmp_path):
    for source in ("pyproject.toml", "workspace/configuration", "initializationOptions"):
        root = tmp_path / source.split("/")[0].split(".")[0]
        root.mkdir()
        markers = tmp_path / f"markers-{root.name}"
        argv_log = tmp_path / f"argv-{root.name}"
        own_nvcc = user_nvcc(tmp_path, argv_log)
        init = hostile_workspace(root, markers, source)
        options = {"trusted": False, **init.pop("initialization_options", {})}
        options["userSettings"] = {"nvccPath": str(own_nvcc)}  # the user's own choice, from user scope
        async with running_server(root, command=server_in(root), initialization_options=options, **init) as client:
            await exercise(client, root)
            await wait_until(lambda: argv_log.exists() and argv_log.read_text().strip(), 30, "the user's nvcc")
            info = await server_info(client)
            s = info["settings"]
            assert s["nvcc_path"] == str(own_nvcc) and s["python"] == "", source
            assert s["extra_flags"] == ["-O3", "-DSAFE_MACRO=1", "-Xptxas", "-v"], source
            assert s["include_paths"] == ["inc"] and s["kernels_dir"] == "stitch_kernels" and s["pair"] == [], source
            shown = [m.message for m in client.messages if "not trusted" in m.message and "ignored" in m.message]
            assert len(shown) == 1, (source, [m.message for m in client.messages])
            for words in ("nvccPath", "python", f"-ccbin {root}/evil-cc", "-fplugin", "/usr/include/evil", "kernelsDir",
                          source):
                assert words in shown[0], (words, shown[0])
            logged = "\n".join(m.message for m in client.log_messages)
            assert "evil-python" in logged and "--options-file flags.txt" in logged
        argv = argv_log.read_text()
        assert "-O3" in argv and "-DSAFE_MACRO=1" in argv and f"-I{root / 'inc'}" in argv
        for bad in ("evil", "-ccbin", "-Xcompiler", "--options-file", "-run", "/tmp/stitch-evil.o"):
            assert bad not in argv, (source, bad, argv)
        assert not markers.exists(), (source, markers.read_text())


async def test_trusting_the_workspace_lets_its_settings_choose(tmp_path):
    """The control: the same workspace, trusted, does get its -ccbin (so the test above can fail)."""
    root = tmp_path / "ws"
    root.mkdir()
    markers, argv_log = tmp_path / "markers", tmp_path / "argv"
    own_nvcc = user_nvcc(tmp_path, argv_log)
    hostile_workspace(root, markers, "workspace/configuration")
    settings = {**workspace_settings(root), "nvccPath": str(own_nvcc), "onSave": {"verify": False}}
    async with running_server(root, command=server_in(root), settings=settings,
                              initialization_options={"trusted": True}) as client:
        uri = open_doc(client, root / "k.cu")
        save_doc(client, uri)
        await wait_until(lambda: markers.exists(), 30, "the workspace's host compiler to run")
        info = await server_info(client)
        assert info["settings"]["python"] == str(root / "evil-python") and info["settings"]["kernels_dir"] == "../outside"
        assert not [m for m in client.messages if "not trusted" in m.message]
    assert "evil-cc --version" in markers.read_text()


async def test_trust_granted_later_brings_the_workspace_values_in(tmp_path):
    (tmp_path / "pyproject.toml").write_text('[tool.stitch]\nnvccPath = "/opt/ws/nvcc"\narch = "sm_80"\n')
    async with running_server(tmp_path, initialization_options={"trusted": False}) as client:
        info = await server_info(client)
        assert info["settings"]["nvcc_path"] == "nvcc" and info["settings"]["arch"] == "sm_80"
        client.protocol.notify("stitch/setTrusted", {"trusted": True})
        await wait_until_info(client, lambda i: i["settings"]["nvcc_path"] == "/opt/ws/nvcc")
        client.protocol.notify("stitch/setTrusted", {"trusted": False})
        await wait_until_info(client, lambda i: i["settings"]["nvcc_path"] == "nvcc")


async def test_user_scope_values_apply_while_untrusted(tmp_path):
    """The user's own config file and the editor's user-scope settings are the user's: they apply untrusted."""
    config = tmp_path / "user-config.toml"
    config.write_text('nvccPath = "/opt/cuda/bin/nvcc"\nextraFlags = ["-ccbin", "/usr/bin/g++-13"]\n')
    (tmp_path / "pyproject.toml").write_text('[tool.stitch]\nnvccPath = "./evil.sh"\n')
    async with running_server(tmp_path, env={"STITCH_CONFIG": str(config)},
                              initialization_options={"trusted": False}) as client:
        info = await server_info(client)
        assert info["settings"]["nvcc_path"] == "/opt/cuda/bin/nvcc"
        assert info["settings"]["extra_flags"] == ["-ccbin", "/usr/bin/g++-13"]
        client.protocol.notify("stitch/setUserSettings", {"settings": {"nvccPath": "/usr/local/cuda/bin/nvcc"}})
        await wait_until_info(client, lambda i: i["settings"]["nvcc_path"] == "/usr/local/cuda/bin/nvcc")
        assert sum("nvccPath ./evil.sh" in m.message for m in client.messages) == 1


def stitch_cli(*args: str, cwd: Path, config: Path | None = None):
    import subprocess

    from tests.lsp.harness import server_env

    env = server_env({"STITCH_CONFIG": str(config)} if config else None)
    return subprocess.run([sys.executable, "-m", "stitch_lsp.cli", *args], capture_output=True, text=True,
                          cwd=cwd, env=env, timeout=120)


def test_stitch_check_runs_a_workspace_nvcc_only_when_trusted(tmp_path):
    root, markers = tmp_path / "ws", tmp_path / "markers"
    root.mkdir()
    evil = evil_program(root, "evil-nvcc", markers)
    cc = evil_program(root, "evil-cc", markers)
    (root / "pyproject.toml").write_text(
        f'[tool.stitch]\nnvccPath = "{evil}"\nextraFlags = ["-ccbin", "{cc}", "-O3"]\n')
    (root / "k.cu").write_text(KERNEL)

    out = stitch_cli("check", "k.cu", cwd=root)
    assert not markers.exists(), markers.read_text()
    assert "ignored settings" in out.stderr and "nvccPath" in out.stderr and "-ccbin" in out.stderr
    assert "--trust-workspace" in out.stderr and "trustedWorkspaces" in out.stderr
    assert "could not find nvcc ('nvcc')" in out.stderr or "kernel scale" in out.stdout  # the user's own nvcc

    out = stitch_cli("check", "k.cu", "--trust-workspace", cwd=root)
    assert "evil-nvcc" in markers.read_text(), out.stderr
    assert "ignored settings" not in out.stderr
    markers.unlink()

    config = tmp_path / "config.toml"
    config.write_text(f'trustedWorkspaces = ["{root}"]\n')
    stitch_cli("check", "k.cu", cwd=root, config=config)
    assert "evil-nvcc" in markers.read_text()


async def test_one_message_for_every_source(tmp_path):
    (tmp_path / "pyproject.toml").write_text('[tool.stitch]\nnvccPath = "./evil.sh"\n')
    settings = {"python": "/tmp/evil-python", "extraFlags": ["-ccbin", "/tmp/evil-cc"]}
    async with running_server(tmp_path, settings=settings, initialization_options={"trusted": False}) as client:
        await server_info(client)
        await asyncio.sleep(0.3)
        shown = [m.message for m in client.messages if "not trusted" in m.message]
        assert len(shown) == 1, shown
        for words in ("from pyproject.toml: nvccPath ./evil.sh", "from workspace/configuration: python /tmp/evil-python",
                      "extraFlags -ccbin /tmp/evil-cc"):
            assert words in shown[0], shown[0]
