"""Secrets in child processes: a fake nvcc that dumps its environment, under the CLI and on save in the
server, with canary secrets in the environment that starts them. (The report: nvcc saw GITHUB_TOKEN,
AWS_SECRET_ACCESS_KEY, OPENAI_API_KEY, DB_PASSWORD, and from the CLI ANTHROPIC_API_KEY too.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from stitch_lsp import child_env
from tests.lsp.harness import open_doc, running_server, save_doc, server_env, wait_until
from tests.security.test_workspace_trust import KERNEL

CANARIES = {
    "GITHUB_TOKEN": "ghp_CANARYgithub", "AWS_SECRET_ACCESS_KEY": "CANARYaws", "AWS_ACCESS_KEY_ID": "AKIACANARY",
    "OPENAI_API_KEY": "sk-CANARYopenai", "DB_PASSWORD": "CANARYdb", "ANTHROPIC_API_KEY": "sk-ant-CANARY",
    "MY_SERVICE_KEY": "CANARYservice", "HF_TOKEN": "hf_CANARY", "CUDA_SECRET_THING": "CANARYcuda",
    "GOOGLE_APPLICATION_CREDENTIALS": "/CANARY/creds.json", "SOME_RANDOM_VAR": "CANARYnotallowlisted",
}


def dumping_nvcc(folder: Path, dump: Path) -> Path:
    """An nvcc that writes its environment as JSON, then fails like a compile error would."""
    path = folder / "nvcc"
    path.write_text(f"#!{sys.executable}\nimport json, os\nopen({str(dump)!r}, 'w').write(json.dumps(dict(os.environ)))\n"
                    "print('release 13.0, V13.0.88')\n")
    path.chmod(0o755)
    return path


def assert_clean(env: dict[str, str]) -> None:
    leaked = sorted(k for k in CANARIES if k in env) + sorted(k for k, v in env.items() if "CANARY" in v)
    assert not leaked, leaked
    assert env.get("PATH") and env.get("HOME")  # what the tools need still arrives


def test_allowlists_unit():
    source = {**CANARIES, "PATH": "/bin", "HOME": "/h", "LANG": "C.UTF-8", "LC_ALL": "C", "TMPDIR": "/t",
              "CUDA_HOME": "/cuda", "LD_LIBRARY_PATH": "/l", "PYTHONPATH": "/dev-checkout", "VIRTUAL_ENV": "/v"}
    tool = child_env.tool_env(source=source)
    assert_clean(tool)
    assert {"LANG", "LC_ALL", "TMPDIR", "CUDA_HOME", "LD_LIBRARY_PATH"} <= set(tool)
    assert "PYTHONPATH" not in tool
    worker = child_env.worker_env(source=source)
    assert_clean(worker)
    assert worker["PYTHONPATH"].endswith(os.pathsep + "/dev-checkout") and worker["VIRTUAL_ENV"] == "/v"
    # The user's own additions arrive; a secret among them does not.
    added = child_env.tool_env({"CCACHE_DIR": "/c", "EXTRA_TOKEN": "x"}, source=source)
    assert added["CCACHE_DIR"] == "/c" and "EXTRA_TOKEN" not in added
    # Only a child that runs the LLM Coder gets the key, and only the key.
    llm = child_env.llm_worker_env("sk-ant-key", source=source)
    assert llm["ANTHROPIC_API_KEY"] == "sk-ant-key" and "OPENAI_API_KEY" not in llm


def test_record_command_gets_the_users_environment(monkeypatch):
    monkeypatch.setenv("SOME_RANDOM_VAR", "mine")
    assert child_env.user_command_env()["SOME_RANDOM_VAR"] == "mine"


def test_cli_nvcc_sees_no_secret(tmp_path):
    dump = tmp_path / "env.json"
    nvcc = dumping_nvcc(tmp_path, dump)
    (tmp_path / "k.cu").write_text(KERNEL)
    env = server_env({**CANARIES, "STITCH_CONFIG": os.devnull})
    out = subprocess.run([sys.executable, "-m", "stitch_lsp.cli", "check", "k.cu", "--nvcc", str(nvcc)],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert "Traceback" not in out.stderr, out.stderr
    assert dump.exists(), out.stderr
    assert_clean(json.loads(dump.read_text()))


async def test_server_nvcc_sees_no_secret_on_save(tmp_path):
    dump = tmp_path / "env.json"
    nvcc = dumping_nvcc(tmp_path, dump)
    config = tmp_path / "config.toml"
    config.write_text(f'nvccPath = "{nvcc}"\nextraEnv = {{ CCACHE_DIR = "/from-user-config" }}\n')
    (tmp_path / "ws").mkdir()
    (tmp_path / "ws" / "k.cu").write_text(KERNEL)
    async with running_server(tmp_path / "ws", env={**CANARIES, "STITCH_CONFIG": str(config)},
                              initialization_options={"trusted": False}) as client:
        uri = open_doc(client, tmp_path / "ws" / "k.cu")
        save_doc(client, uri)
        await wait_until(lambda: dump.exists() and dump.read_text(), 60, "the fake nvcc to run")
    env = json.loads(dump.read_text())
    assert_clean(env)
    assert env["CCACHE_DIR"] == "/from-user-config"  # what the user added in their own settings
