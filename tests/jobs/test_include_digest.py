"""Headers a kernel includes are part of its cache key: editing one is a new question."""

from __future__ import annotations

from pathlib import Path

from stitch_lsp.jobs.binding import local_includes_digest

KERNEL = '#include "common/math.cuh"\n#include <cuda_fp16.h>\n__global__ void k(float* x) { x[0] = twice(1.f); }\n'


def test_an_edited_header_changes_the_digest(tmp_path: Path):
    (tmp_path / "common").mkdir()
    header = tmp_path / "common" / "math.cuh"
    header.write_text('#include "inner.cuh"\n__device__ float twice(float v) { return 2.f * v; }\n')
    inner = tmp_path / "common" / "inner.cuh"
    inner.write_text("#define SCALE 1\n")
    cu = tmp_path / "k.cu"
    first = local_includes_digest(cu, KERNEL)
    assert first and first == local_includes_digest(cu, KERNEL)
    inner.write_text("#define SCALE 2\n")  # two levels down
    second = local_includes_digest(cu, KERNEL)
    assert second != first
    header.unlink()
    assert local_includes_digest(cu, KERNEL) not in (first, second)


def test_no_local_includes_no_digest(tmp_path: Path):
    assert local_includes_digest(tmp_path / "k.cu", "#include <cstdio>\n__global__ void k() {}\n") == ""
