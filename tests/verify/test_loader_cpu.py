"""The runtime loader's pure parts: kernel signatures, argument conversion, NVRTC log mapping."""

from __future__ import annotations

import ctypes

import pytest

from stitch_lsp.runtime import loader

SOURCE = r'''
// a comment with __global__ void fake(int) in it
template <typename T> __device__ T twice(T v) { return v + v; }
extern "C" __global__ void __launch_bounds__(256) scale(const float* __restrict__ x, float* y,
                                                         float a, int n, long long stride, __half h,
                                                         unsigned int flags, const int2* pairs) {
}
'''


def test_kernel_params_are_read_from_the_source():
    params = loader.kernel_params(SOURCE, "scale")
    assert [(p.kind, p.base) for p in params] == [
        ("pointer", "float"), ("pointer", "float"), ("scalar", "float"), ("scalar", "int"),
        ("scalar", "long long"), ("scalar", "__half"), ("scalar", "unsigned int"), ("pointer", "int2"),
    ]
    assert loader.kernel_params(SOURCE, "missing") is None


def test_scalars_follow_the_parameter_type():
    params = {p.base: p for p in loader.kernel_params(SOURCE, "scale")}
    f = loader._scalar(params["float"], 2, 2, "scale")
    assert isinstance(f, ctypes.c_float) and f.value == 2.0  # a Python int for a float param
    i = loader._scalar(params["int"], 7, 3, "scale")
    assert isinstance(i, ctypes.c_int32) and i.value == 7
    big = loader._scalar(params["long long"], 1 << 40, 4, "scale")
    assert isinstance(big, ctypes.c_int64) and big.value == 1 << 40
    h = loader._scalar(params["__half"], 1.0, 5, "scale")
    assert h.value == 0x3C00  # IEEE half 1.0
    with pytest.raises(TypeError, match="integer"):
        loader._scalar(params["int"], 2.5, 3, "scale")


def test_pointer_checks_reject_cpu_tensors_and_wrong_dtypes():
    import torch

    params = loader.kernel_params(SOURCE, "scale")
    with pytest.raises(TypeError, match="CUDA tensor"):
        loader._pointer(params[0], torch.zeros(4), 0, "scale", 0)
    assert loader._pointer(params[0], None, 0, "scale", 0).value is None
    assert loader._pointer(params[0], 1234, 0, "scale", 0).value == 1234


def test_dim3():
    assert loader._dim3(5, "grid") == (5, 1, 1)
    assert loader._dim3((2, 3), "grid") == (2, 3, 1)
    with pytest.raises(ValueError):
        loader._dim3((0,), "block")


def test_nvrtc_log_is_parsed_for_the_callers_file():
    log = ('candidate.py(14): error: identifier "undefined_name" is undefined\n'
           "1 error detected in the compilation of \"candidate.py\".\n")
    text, diags = loader.parse_nvrtc_log(log, "candidate.py")
    assert [(d.file, d.line, d.severity) for d in diags] == [("candidate.py", 14, "error")]
    assert "undefined_name" in diags[0].message
    err = loader.KernelCompileError("scale", "candidate.py", text, diags)
    assert "candidate.py:14" in str(err)


def test_dim3_fast_paths_agree_with_the_general_one():
    assert loader._dim3((4096, 1, 1), "grid") == (4096, 1, 1)
    assert loader._dim3(7, "grid") == (7, 1, 1)
    assert loader._dim3([2, 2, 2], "grid") == (2, 2, 2)
    for bad in ((0, 1, 1), (1, -1, 1), 0, (1.5, 1, 1)):
        with pytest.raises((ValueError, TypeError)):
            loader._dim3(bad, "block")


def test_pack_points_at_each_argument():
    values = [ctypes.c_void_p(0x1000), ctypes.c_float(2.5), ctypes.c_int32(-7), ctypes.c_int64(1 << 40),
              ctypes.c_uint16(0x3C00)]
    array = loader._pack(values)
    assert len(array) == 5
    assert ctypes.c_void_p.from_address(array[0]).value == 0x1000
    assert ctypes.c_float.from_address(array[1]).value == 2.5
    assert ctypes.c_int32.from_address(array[2]).value == -7
    assert ctypes.c_int64.from_address(array[3]).value == 1 << 40
    assert ctypes.c_uint16.from_address(array[4]).value == 0x3C00
    # The same addresses the launch path used before (cast of byref).
    assert all(array[i] == ctypes.cast(ctypes.byref(v), ctypes.c_void_p).value for i, v in enumerate(values))
    assert len(loader._pack([])) == 1
