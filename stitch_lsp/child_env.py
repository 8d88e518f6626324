"""The environment of every program Stitch starts, built from an allowlist.

nvcc (and the host compiler it runs), ncu, compute-sanitizer, nvidia-smi and the
workers get what they need to find their tools, libraries, locale and temporary
folder, and nothing else: no API keys, tokens, passwords or cloud credentials
(DESIGN.md rule 7). What the user adds in their own settings (``extraEnv``) is
added, secrets excepted. The one exception is the user's own command under
``stitch record -- COMMAND``: it is their program, run as they would run it, and
gets their environment as it is (``user_command_env``).
"""

from __future__ import annotations

import fnmatch
import os
from pathlib import Path
from typing import Mapping

REPO_ROOT = Path(__file__).resolve().parents[1]

# Names passed on to every child, exactly or by pattern.
TOOL_ALLOWLIST: tuple[str, ...] = (
    "PATH", "HOME", "USER", "LOGNAME", "SHELL", "TERM", "TZ",
    "LANG", "LANGUAGE", "LC_*",
    "TMPDIR", "TMP", "TEMP",
    "CUDA_*", "NVIDIA_*", "NV_*", "LD_LIBRARY_PATH",
    # Where the host compiler finds headers and libraries (conda and module systems set these).
    "CPATH", "C_INCLUDE_PATH", "CPLUS_INCLUDE_PATH", "LIBRARY_PATH",
    "XDG_CACHE_HOME", "XDG_RUNTIME_DIR",
)
# Added for workers (Python processes that import torch and run the checks).
WORKER_ALLOWLIST: tuple[str, ...] = (
    "PYTHONPATH", "VIRTUAL_ENV", "CONDA_PREFIX", "CONDA_DEFAULT_ENV", "PYTHONHASHSEED", "PYTHONUNBUFFERED",
    "STITCH_*", "TORCH_*", "TORCHINDUCTOR_*", "TRITON_*", "PYTORCH_*", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
    "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "RAY_ADDRESS",
)
# Never passed, whatever the allowlist or the settings say.
SECRET_PATTERNS: tuple[str, ...] = (
    "*_KEY", "*_KEYS", "*KEY_*", "*API_KEY*", "*TOKEN*", "*SECRET*", "*PASSWORD*", "*PASSWD*", "*CREDENTIAL*",
    "*_AUTH", "*AUTH_*", "*SESSION*", "*COOKIE*", "ANTHROPIC_*", "OPENAI_*", "AWS_*", "AZURE_*", "GOOGLE_*",
    "GCP_*", "GCLOUD_*", "CLOUDSDK_*", "GITHUB_*", "GH_*", "GITLAB_*", "HF_*", "HUGGING_FACE_*", "NPM_*",
    "DOCKER_*", "KUBECONFIG", "SSH_AUTH_SOCK", "GPG_*", "VAULT_*", "DATABASE_URL", "PGPASS*",
)
# The one variable the LLM Coder's channel needs (a bench shard running the LLM Coder).
ANTHROPIC_KEY = "ANTHROPIC_API_KEY"


def _matches(name: str, patterns: tuple[str, ...]) -> bool:
    upper = name.upper()
    return any(fnmatch.fnmatchcase(upper, p) for p in patterns)


def is_secret(name: str) -> bool:
    return _matches(name, SECRET_PATTERNS)


def _allowed(source: Mapping[str, str], patterns: tuple[str, ...]) -> dict[str, str]:
    return {k: v for k, v in source.items() if _matches(k, patterns) and not is_secret(k)}


def _add_user(env: dict[str, str], extra: Mapping[str, str] | None) -> dict[str, str]:
    for key, value in (extra or {}).items():
        if isinstance(key, str) and isinstance(value, str) and key and "=" not in key and not is_secret(key):
            env[key] = value
    return env


def tool_env(extra: Mapping[str, str] | None = None, *, source: Mapping[str, str] | None = None) -> dict[str, str]:
    """For nvcc, ncu, compute-sanitizer, nvidia-smi, c++filt: the allowlist, plus ``extra`` (the
    user's ``extraEnv`` setting and what Stitch itself sets), secrets never."""
    return _add_user(_allowed(os.environ if source is None else source, TOOL_ALLOWLIST), extra)


def worker_env(extra: Mapping[str, str] | None = None, *, source: Mapping[str, str] | None = None) -> dict[str, str]:
    """For worker processes: the tool allowlist, the Python environment (``PYTHONPATH`` with this
    checkout first, ``VIRTUAL_ENV``), and ``extra``; secrets never."""
    env = _allowed(os.environ if source is None else source, TOOL_ALLOWLIST + WORKER_ALLOWLIST)
    path = env.get("PYTHONPATH", "")
    env["PYTHONPATH"] = str(REPO_ROOT) + (os.pathsep + path if path else "")
    env.setdefault("PYTHONUNBUFFERED", "1")
    return _add_user(env, extra)


def llm_worker_env(api_key: str | None, extra: Mapping[str, str] | None = None, *,
                   source: Mapping[str, str] | None = None) -> dict[str, str]:
    """``worker_env`` plus the Anthropic key: only for a child that runs the LLM Coder itself (a bench
    shard running the llm or auto Coder). What that child starts gets ``worker_env`` again, so the key
    goes no further."""
    env = worker_env(extra, source=source)
    if api_key:
        env[ANTHROPIC_KEY] = api_key
    return env


def user_command_env() -> dict[str, str]:
    """For the user's own command under ``stitch record -- COMMAND`` only: their environment, as it is.
    It is their program, started by them; it must see what it sees when they run it themselves."""
    return dict(os.environ)
