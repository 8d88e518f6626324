"""Fixtures shared by the Verifier's GPU tests."""

from __future__ import annotations

import os

import pytest

from stitch_lsp.settings import Settings


@pytest.fixture(scope="module")
def gpu_verifier(tmp_path_factory):
    """One Verifier (and worker) per test module, with its own kernel cache."""
    from stitch_lsp.verify.service import Verifier

    work = tmp_path_factory.mktemp("verify")
    os.environ["STITCH_KERNEL_CACHE"] = str(work / "kernels")
    v = Verifier(Settings(), work)
    yield v
    v.close()
