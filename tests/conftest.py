"""Shared test setup: GPU and nvcc tests skip cleanly where the machine lacks them."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _has_cuda_gpu() -> bool:
    # Asked in a child so that the test process itself never initialises CUDA.
    try:
        out = subprocess.run(
            [sys.executable, "-c", "import torch; print(torch.cuda.is_available())"],
            capture_output=True, text=True, timeout=120,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return out.stdout.strip().endswith("True")


def pytest_collection_modifyitems(config, items):
    need_gpu = any("gpu" in item.keywords for item in items)
    need_nvcc = any("nvcc" in item.keywords for item in items)
    gpu = _has_cuda_gpu() if need_gpu else False
    nvcc = shutil.which("nvcc") is not None if need_nvcc else False
    for item in items:
        if "gpu" in item.keywords and not gpu:
            item.add_marker(pytest.mark.skip(reason="no CUDA GPU visible to torch"))
        if "nvcc" in item.keywords and not nvcc:
            item.add_marker(pytest.mark.skip(reason="nvcc not on PATH"))


@pytest.fixture(scope="module")
def verifier(tmp_path_factory):
    """One Verifier (one warm worker) per test module: the GPU tests share the machine's time limit."""
    from stitch_lsp.settings import Settings
    from stitch_lsp.verify.service import Verifier

    shared = Verifier(Settings(), tmp_path_factory.mktemp("verify"))
    yield shared
    shared.close()
