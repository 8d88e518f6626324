"""A convolution run in channels-last and its pointwise tail read transposed, checked on the host CPU.

The convolution runs through torch on the CPU (in channels-last, as the binding runs it on the GPU),
the tail kernel is built with g++ and run with a host thread per CUDA thread (its shared-memory tile
needs the block's barrier), and the result is compared with eager PyTorch: 2-D, 3-D and transposed
convolutions, channel counts and spatial sizes that are not multiples of the tile, batch > 1. The
generated module itself is run too (its kernels loaded as host libraries), to see that it calls the
convolution with channels-last tensors, converts the weight once, and sees a weight changed in place.
"""

from __future__ import annotations

import ctypes
import re
import subprocess
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from stitch_lsp.coders.template import lower  # noqa: E402
from stitch_lsp.coders.template.binding import candidate_module  # noqa: E402
from stitch_lsp.coders.template.conv_tail import ENV  # noqa: E402
from stitch_lsp.coders.template.program import program_data  # noqa: E402
from stitch_lsp.pipeline import Task  # noqa: E402
from tests.agents import test_template_pointwise_host as host  # noqa: E402
from tests.agents import test_template_rows_host as rows  # noqa: E402

pytestmark = [pytest.mark.timeout(900),
              pytest.mark.skipif(host.GXX is None or host.INCLUDE is None, reason="needs g++ and the CUDA headers")]

MODEL = """
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.{conv}
        self.bias = nn.Parameter(torch.randn({bias_shape}))

    def forward(self, {args}):
        y = self.conv(x)
        return {tail}


def get_inputs():
    return [{inputs}]


def get_init_inputs():
    return []
"""


def _source(conv: str, bias_shape: str, tail: str, inputs: str, args: str = "x") -> str:
    return MODEL.format(conv=conv, bias_shape=bias_shape, tail=tail, inputs=inputs, args=args)


CASES = {
    # 5 channels, 9 x 11 positions: one partial tile of 8 x 128
    "conv2d-bias-clamp-sigmoid": _source(
        "Conv2d(3, 5, 3, padding=1)", "5, 1, 1",
        "torch.sigmoid(torch.clamp(y + self.bias, -0.5, 0.75) * 2.0) / 3.0", "torch.randn(2, 3, 9, 11)"),
    # 37 channels, 7 x 7 positions: two channel tiles of 32 and two position tiles, both partial
    "conv2d-many-channels-mish": _source(
        "Conv2d(4, 37, 3)", "37, 1, 1", "F.mish(y - self.bias) * 0.5", "torch.randn(3, 4, 9, 9)"),
    # a second full-size input read as NCHW beside the transposed one
    "conv3d-residual": _source(
        "Conv3d(2, 6, 3)", "6, 1, 1, 1", "torch.relu(y * self.bias + r) - torch.tanh(y)",
        "torch.randn(2, 2, 5, 6, 7), torch.randn(2, 6, 3, 4, 5)", args="x, r"),
    "conv-transpose2d-hardswish": _source(
        "ConvTranspose2d(4, 3, 3, stride=2)", "3, 1, 1", "F.hardswish(y + self.bias).clamp(max=0.4)",
        "torch.randn(2, 4, 5, 6)"),
}


def _program(source: str):
    from stitch_lsp.worker.trace_handler import trace_task

    reply = trace_task(source)
    assert reply.ok, reply.message
    return lower(reply.graph)


def _transposed(program) -> dict:
    steps = program_data(program)["steps"]
    return {"conv": [s["layout"] for s in steps if s.get("layout")],
            "kernels": [s["layouts"] for s in steps if s.get("layouts")]}


@pytest.mark.parametrize("case", sorted(CASES))
def test_channels_last_convolution_and_transposed_tail_match_eager(case, tmp_path, monkeypatch):
    program = _program(CASES[case])
    seen = _transposed(program)
    fmt = "channels_last_3d" if "conv3d" in case else "channels_last"
    # The convolution runs without its bias; the tail kernel adds it as it reads the output.
    assert seen["conv"] == [fmt] and seen["kernels"] == [{"convolution_nobias": fmt}], program.notes
    assert any("convolution in channels-last" in n for n in program.notes), program.notes
    assert any("bias is added in the kernel that reads its output" in n for n in program.notes), program.notes
    # Its input written in channels-last by the program's own transpose kernel (run here, on the host).
    (conv,) = [s for s in program_data(program)["steps"] if s.get("layout")]
    x_shape = [2, 2, 5, 6, 7] if "conv3d" in case else None
    assert conv["convert"]["kernel"].startswith("stitch_layout_"), conv
    if x_shape:
        assert conv["convert"]["shape"] == [2, 5, 6, 7, 2]
    monkeypatch.setattr(host, "_driver", rows._driver)  # the tile's barrier needs every thread of a block
    host.check_against_eager(CASES[case], program, ("random", "nan"), tmp_path)


def test_tails_with_reductions_and_the_switch_keep_nchw(monkeypatch):
    """A softmax over the channels reads the output as NCHW; ``STITCH_CONV_LAYOUT=nchw`` turns it off."""
    softmax = _source("Conv2d(3, 5, 3)", "5, 1, 1", "torch.softmax(y + self.bias, dim=1)",
                      "torch.randn(2, 3, 9, 11)")
    program = _program(softmax)
    assert _transposed(program) == {"conv": [], "kernels": []}
    assert any("convolution in NCHW: it feeds a" in n for n in program.notes), program.notes
    monkeypatch.setenv(ENV, "nchw")
    program = _program(CASES["conv2d-bias-clamp-sigmoid"])
    assert _transposed(program) == {"conv": [], "kernels": []}
    assert any(f"{ENV} turns channels-last off" in n for n in program.notes), program.notes
    # The fuse service's second try, in NCHW after a refused channels-last candidate, says it was asked.
    monkeypatch.delenv(ENV)
    from stitch_lsp.worker.trace_handler import trace_task

    program = lower(trace_task(CASES["conv2d-bias-clamp-sigmoid"]).graph, channels_last=False)
    assert any("this candidate was generated in NCHW" in n for n in program.notes), program.notes


def test_the_bias_stays_in_a_convolution_whose_output_is_returned_and_a_bare_one_is_unchanged():
    returned = _source("Conv2d(3, 5, 3)", "5, 1, 1", "y, torch.relu(y)", "torch.randn(2, 3, 9, 11)")
    program = _program(returned)
    (conv,) = [s for s in program_data(program)["steps"] if s.get("op") == "aten.convolution.default"]
    assert conv["name"] == "convolution" and conv["args"][2] is not None
    bare = _source("Conv2d(3, 5, 3, bias=False)", "5, 1, 1", "torch.relu(y + self.bias)", "torch.randn(2, 3, 9, 11)")
    program = _program(bare)
    assert not any("bias is added" in n for n in program.notes), program.notes


def test_a_channel_reduction_after_a_biased_convolution_adds_the_bias_as_it_reads(tmp_path, monkeypatch):
    softmax = _source("Conv2d(3, 5, 3)", "5, 1, 1", "torch.softmax(y * self.bias, dim=1)", "torch.randn(2, 3, 9, 11)")
    program = _program(softmax)
    steps = program_data(program)["steps"]
    (conv,) = [s for s in steps if s.get("op") == "aten.convolution.default"]
    assert conv["args"][2] is None
    assert [s for s in steps if s.get("kernel")][0]["args"].count("convolution_nobias") == 1
    monkeypatch.setattr(host, "_driver", rows._driver)
    host.check_against_eager(softmax, program, ("random", "nan"), tmp_path)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_the_input_transpose_copies_every_value_bit_for_bit(dtype, tmp_path, monkeypatch):
    from stitch_lsp.coders.template.conv_tail import input_kernel
    from stitch_lsp.op_graph import OpNode

    # 37 channels x 63 positions: partial tiles both ways; NaN payloads and -0.0 kept as they are.
    x = OpNode(name="x", op="placeholder", shape=(2, 37, 7, 9), dtype=dtype)
    conv = OpNode(name="conv", op="aten.convolution.default", args_json='[{"$": "x"}, {"$": "w"}, null]',
                  shape=(2, 5, 5, 7), dtype=dtype)
    spec = input_kernel(conv, {"x": x, "conv": conv}, "stitch_layout_0")
    value = torch.randn(2, 37, 7, 9).to(getattr(torch, dtype))
    value.view(-1)[[3, 50, 400]] = torch.tensor([float("nan"), -0.0, float("inf")]).to(value.dtype)
    env = {"x": value}
    out = spec.outputs[0]
    step = {"kernel": spec.name, "args": ["x"], "grid": spec.grid, "block": spec.block,
            "outputs": [[out, list(spec.scratch[out][0]), dtype]]}
    monkeypatch.setattr(host, "_driver", rows._driver)
    host._run_kernel(step, spec.source, env, tmp_path)
    want = value.permute(0, 2, 3, 1).contiguous()
    bits = torch.int32 if dtype == "float32" else torch.int16
    assert env[out].shape == want.shape and torch.equal(env[out].view(bits), want.view(bits))


def test_plan_says_which_layout_runs():
    from stitch_lsp.coders import conv_layouts
    from stitch_lsp.plan.planner import describe, make_plan
    from stitch_lsp.worker.trace_handler import trace_task

    source = CASES["conv2d-bias-clamp-sigmoid"]
    text = describe(make_plan(Task(name="t", source=source), trace_task(source).graph, layouts=conv_layouts))
    assert "convolution in channels-last; the tail kernel reads it transposed" in text, text


# ----------------------------------------------------------------------------- the generated module


class _HostKernel:
    """A kernel built for the host as a shared library and launched with raw pointers, so it reads the
    tensors' memory as the GPU kernel would, whatever their layout."""

    def __init__(self, source: str, name: str, tmp: Path) -> None:
        self.kind = name.split("_")[1]  # stitch_layout_N, stitch_fused_N
        sig = re.search(rf"{name}\((.*?)\) \{{", source).group(1)
        types = [p.rsplit("__restrict__", 1)[0].strip() for p in sig.split(", ")]
        args = ", ".join(f"({t})p[{k}]" for k, t in enumerate(types))
        launcher = f"""
extern "C" void stitch_launch(unsigned grid, unsigned block, void** p) {{
  gridDim.x = grid; blockDim.x = block; stitch_cluster_size = 1;
  stitch_block_barriers[0].count = block;
  for (unsigned w = 0; w < (block + 31) / 32; ++w) stitch_warp_barriers[w].count = block - 32 * w < 32 ? block - 32 * w : 32;
  for (unsigned b = 0; b < grid; ++b) {{
    std::vector<std::thread> threads;
    for (unsigned t = 0; t < block; ++t) threads.emplace_back([=] {{ blockIdx.x = b; threadIdx.x = t; {name}({args}); }});
    for (auto& th : threads) th.join();
  }}
}}
"""
        cpp, lib = tmp / f"{name}.cpp", tmp / f"{name}.so"
        cpp.write_text(rows.SHIM + source + launcher)
        out = subprocess.run([host.GXX, "-std=c++17", "-O1", "-w", "-shared", "-fPIC", "-pthread",
                              f"-I{host.INCLUDE}", "-o", str(lib), str(cpp)], capture_output=True, text=True,
                             timeout=300)
        assert out.returncode == 0, out.stderr[-3000:]
        self.lib = ctypes.CDLL(str(lib))
        self.launches = 0

    def __call__(self, grid, block, args):
        self.launch_pointers(grid, block, [t.data_ptr() for t in args])

    def launch_pointers(self, grid, block, pointers):
        self.launches += 1
        self.lib.stitch_launch(ctypes.c_uint(grid[0]), ctypes.c_uint(block[0]),
                               (ctypes.c_void_p * len(pointers))(*pointers))


class _Spy(torch.utils._python_dispatch.TorchDispatchMode):
    """The convolutions' operands' layouts, and the copies that convert a tensor of the weight's shape."""

    def __init__(self, weight_shape) -> None:
        super().__init__()
        self.weight_shape = tuple(weight_shape)
        self.conv_layouts: list[tuple[bool, bool]] = []
        self.weight_copies = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.ops.aten.convolution.default:
            self.conv_layouts.append(tuple(a.is_contiguous(memory_format=torch.channels_last) for a in args[:2]))
        elif func in (torch.ops.aten.clone.default, torch.ops.aten.copy_.default, torch.ops.aten.empty_like.default) \
                and tuple(args[0].shape) == self.weight_shape:
            self.weight_copies += 1
        return func(*args, **kwargs)


# The module's loader names, bound below to kernels built for the host (nothing to compile ahead).
_HOST_LOADER = "load_kernel = load_triton = None\nprefetch_kernels = lambda kernels: 0"


def host_models(source: str, program, tmp_path: Path):
    """The reference and the generated module's model (its kernels built for the host and loaded on first use,
    with the reference's weights copied in place, by name, as the Verifier copies them), and the kernels loaded."""
    module = candidate_module(Task(name="t", source=source), program, loader_import=_HOST_LOADER)
    ns: dict = {}
    exec(compile(module, "candidate", "exec"), ns)
    kernels: list[_HostKernel] = []

    def load_kernel(src, name):
        kernels.append(_HostKernel(src, name, tmp_path))
        return kernels[-1]

    ns["load_kernel"] = load_kernel

    def prepare(self, tensors):  # the binding's own preparation, without its refusal of CPU tensors
        prog = self.programs[ns["_signature"](tensors)] = ns["_Prepared"](self.data_for(tensors))
        return prog

    ns["_Fused"].prepare = prepare
    ref_ns: dict = {}
    exec(compile(source, "reference", "exec"), ref_ns)
    torch.manual_seed(0)
    ref = ref_ns["Model"]().eval()
    cand = ns["ModelNew"]().eval()
    with torch.no_grad():
        for name, value in cand.state_dict().items():
            value.copy_(ref.state_dict()[name])
    return ref, cand, kernels


def test_generated_module_runs_the_convolution_in_channels_last_and_sees_weight_changes(tmp_path):
    source = CASES["conv2d-many-channels-mish"]
    ref, cand, kernels = host_models(source, _program(source), tmp_path)
    spy = _Spy(cand.conv.weight.shape)
    x = torch.randn(3, 4, 9, 9)
    with torch.no_grad():
        for step in range(4):
            if step == 2:  # a weight changed in place between calls is seen
                for m in (ref, cand):
                    m.conv.weight.mul_(-0.5)
            want = ref(x)
            with spy:
                got = cand(x)
            assert got.is_contiguous() and got.shape == want.shape
            torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
    assert spy.conv_layouts == [(True, True)] * 4
    assert spy.weight_copies == 2, "the weight is converted once per value"
    # The input's transpose into channels-last, then the tail, each loaded once and launched every call.
    assert [(k.kind, k.launches) for k in kernels] == [("layout", 4), ("fused", 4)]
