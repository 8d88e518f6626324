"""The hazards the race and barrier rules describe are real: each docs page's Bad example
trips compute-sanitizer on a GPU, and its Good example is clean.

Runs on a machine with an NVIDIA GPU, nvcc and compute-sanitizer:
    PYTHONPATH=. python3 -m pytest -q -m gpu tests/analysis/test_rules_on_gpu.py
The harnesses are also compiled (not run) wherever nvcc is present.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parents[2] / "docs" / "rules"

# rule -> (compute-sanitizer tool, the launch that exercises the docs example)
# STC002 (a barrier under a thread-dependent branch) is not here: it is undefined
# behaviour, but on the H100 (independent thread scheduling) synccheck reported nothing
# for the docs example (bench/results/gpu_checks_h100.md), so no tool run can back it.
CASES = {
    "STC003": ("racecheck", "shift<<<1, 256>>>(x, y);"),
    "STC017": ("racecheck", "tiled_sum<<<1, 256>>>(x, y, 4096);"),
}
HARNESS = """
#include <cuda_runtime.h>
#include <cstdio>
{kernel}
int main() {{
  float *x, *y;
  cudaMalloc(&x, 4096 * sizeof(float));
  cudaMalloc(&y, 4096 * sizeof(float));
  cudaMemset(x, 0, 4096 * sizeof(float));
  {launch}
  cudaError_t err = cudaDeviceSynchronize();
  printf("status %s\\n", cudaGetErrorString(err));
  return 0;
}}
"""


def example(code: str, kind: str) -> str:
    text = (DOCS / f"{code}.md").read_text()
    return re.search(rf"^## {kind}\n\n```cuda\n(.*?)\n```", text, re.S | re.M).group(1)


def build(code: str, kind: str, tmp_path: Path) -> Path:
    src = tmp_path / f"{code}_{kind}.cu"
    src.write_text(HARNESS.format(kernel=example(code, kind), launch=CASES[code][1]))
    exe = tmp_path / f"{code}_{kind}"
    out = subprocess.run(["nvcc", "-arch=native", "-lineinfo", "-o", str(exe), str(src)],
                         capture_output=True, text=True, timeout=300)
    if out.returncode != 0 and "native" in out.stderr:  # no GPU to ask: pick Hopper
        out = subprocess.run(["nvcc", "-arch=sm_90", "-lineinfo", "-o", str(exe), str(src)],
                             capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return exe


def hazards(tool: str, exe: Path) -> int:
    out = subprocess.run(["compute-sanitizer", "--tool", tool, str(exe)], capture_output=True, text=True,
                         timeout=300)
    text = out.stdout + out.stderr
    m = re.search(r"(?:RACECHECK SUMMARY: (\d+) hazards? displayed|ERROR SUMMARY: (\d+) errors?)", text)
    assert m, text
    return int(m.group(1) or m.group(2))


@pytest.mark.nvcc
@pytest.mark.parametrize("code", sorted(CASES))
def test_harnesses_compile(code, tmp_path):
    build(code, "Bad", tmp_path)
    build(code, "Good", tmp_path)


@pytest.mark.gpu
@pytest.mark.skipif(shutil.which("compute-sanitizer") is None, reason="compute-sanitizer not on PATH")
@pytest.mark.parametrize("code", sorted(CASES))
def test_bad_example_trips_the_sanitizer_and_good_one_does_not(code, tmp_path):
    tool = CASES[code][0]
    assert hazards(tool, build(code, "Bad", tmp_path)) > 0
    assert hazards(tool, build(code, "Good", tmp_path)) == 0
