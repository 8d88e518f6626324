"""Without a GPU the candidate is still compiled here with nvcc: the verdict's compile is filled."""

from __future__ import annotations

import os
import shutil

import pytest

from stitch_lsp.pipeline import Candidate
from stitch_lsp.settings import Settings
from stitch_lsp.verify.nvcc import find_nvcc
from stitch_lsp.verify.spill_report import SpillReport, kernel_sources

KERNEL = """
extern "C" __global__ void scale(const float* x, float* y, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i];
}
"""
MANIFEST = '{"inputs": ["x"], "source": "__global__ void k() {}"}'
MODULE = f"KERNEL = {KERNEL!r}\nMANIFEST = {MANIFEST!r}\n"

needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")


def test_a_json_manifest_quoting_cuda_is_not_a_translation_unit():
    sources = kernel_sources(Candidate(module_source=MODULE))
    assert list(sources.values()) == [KERNEL]


@needs_nvcc
def test_compile_result_gives_registers_and_spills():
    result = SpillReport(Settings(arch="sm_90"), Candidate(module_source=MODULE)).compile_result()
    assert result is not None and result.ok and result.backend == "nvcc"
    [kernel] = result.kernels
    assert kernel.name == "scale" and kernel.registers > 0 and kernel.spill_stores == 0


@needs_nvcc
def test_compile_result_gives_the_compilers_error():
    broken = Candidate(module_source=f"KERNEL = {KERNEL.replace('a * x[i]', 'a * undefined_name')!r}\n")
    result = SpillReport(Settings(arch="sm_90"), broken).compile_result()
    assert result is not None and not result.ok
    assert any("undefined_name" in d.message for d in result.diagnostics), result.log


def test_a_relative_nvcc_path_is_the_servers_folder(tmp_path, monkeypatch):
    tool = tmp_path / "tools" / "nvcc-wrapper"
    tool.parent.mkdir()
    tool.write_text("#!/bin/sh\nexit 0\n")
    tool.chmod(0o755)
    monkeypatch.chdir(tmp_path)
    assert find_nvcc("./tools/nvcc-wrapper") == str(tool)
    assert os.path.isabs(find_nvcc("./tools/nvcc-wrapper"))
