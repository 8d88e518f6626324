"""A program's kernels compiled together before its first call (``loader.prefetch_kernels``): each then
loads without compiling again, and a kernel that does not compile still fails where it is launched."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
loader = pytest.importorskip("stitch_lsp.runtime.loader")

pytestmark = pytest.mark.gpu


def _kernels(n: int, first: int = 0) -> list[tuple[str, str]]:
    # Each test its own kernels: a kernel loaded by another test is in this process's cache already.
    return [(f'extern "C" __global__ void fill{i}(float* y) {{ y[threadIdx.x] = {i}.5f; }}', f"fill{i}")
            for i in range(first, first + n)]


@pytest.fixture
def fresh_cache(tmp_path, monkeypatch):
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    monkeypatch.setenv("STITCH_KERNEL_CACHE", str(tmp_path))
    return tmp_path


def test_prefetched_kernels_load_and_run_without_compiling_again(fresh_cache, monkeypatch):
    kernels = _kernels(6)
    assert loader.prefetch_kernels(kernels) == 6
    compiled = []
    real = loader.compile_cubin
    monkeypatch.setattr(loader, "compile_cubin", lambda *a, **k: compiled.append(a[1]) or real(*a, **k))
    for i, (source, name) in enumerate(kernels):
        y = torch.zeros(32, device="cuda")
        loader.load_kernel(source, name)((1, 1, 1), (32, 1, 1), [y])
        assert torch.all(y == i + 0.5).item()
    assert compiled == []
    assert loader.prefetch_kernels(kernels) == 0  # loaded: nothing left to compile


def test_a_kernel_that_does_not_compile_fails_at_its_own_load(fresh_cache):
    broken = ('extern "C" __global__ void broken(float* y) { y[0] = undefined_name; }', "broken")
    kernels = _kernels(2, first=100) + [broken]
    assert loader.prefetch_kernels(kernels) == 3  # no exception here
    with pytest.raises(loader.KernelCompileError, match="undefined_name"):
        loader.load_kernel(*broken)
