"""Convolutions chained in channels-last (``conv_chain``), checked on the host CPU.

Between two convolutions, the kernel that runs BatchNorm, ReLU and the residual add reads and writes
channels-last, and the next convolution takes its output as it lies: no transpose per convolution. The
kernels are built with g++ and run a host thread per CUDA thread, the convolutions run through torch on
the CPU as the binding runs them, and the result is compared with eager PyTorch, including NaN inputs.
The generated module itself is run too, to see what the user's GPU would be asked to do: which
convolutions get channels-last operands, which conversions run, and that its output is NCHW.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from stitch_lsp.coders.template import lower  # noqa: E402
from stitch_lsp.coders.template.program import program_data  # noqa: E402
from tests.agents import test_template_pointwise_host as host  # noqa: E402
from tests.agents import test_template_rows_host as rows  # noqa: E402
from tests.agents.test_conv_tail_host import host_models  # noqa: E402

pytestmark = [pytest.mark.timeout(900),
              pytest.mark.skipif(host.GXX is None or host.INCLUDE is None, reason="needs g++ and the CUDA headers")]

# Two residual blocks (the second halves the size and widens through a 1x1 convolution), then a global pool.
# 6 and 10 channels: rows of channels not a multiple of 4.
RESNET = """
import torch
import torch.nn as nn


class Block(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.down = None if stride == 1 and cin == cout else nn.Sequential(
            nn.Conv2d(cin, cout, 1, stride=stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        out = torch.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return torch.relu(out + (x if self.down is None else self.down(x)))


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 6, 3, padding=1)
        self.blocks = nn.Sequential(Block(6, 6, 1), Block(6, 10, 2))
        for m in self.modules():  # statistics that are not the identity
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.uniform_(-0.5, 0.5)
                m.running_var.uniform_(0.5, 2.0)

    def forward(self, x):
        x = torch.relu(self.stem(x))
        x = self.blocks(x)
        return torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1)


def get_inputs():
    return [torch.randn(2, 3, 9, 11)]


def get_init_inputs():
    return []
"""

# A 3-D chain whose last convolution's output is returned through a tail: that tail writes NCHW.
CONV3D = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Conv3d(2, 5, 3, padding=1)
        self.b = nn.Conv3d(5, 7, 3, padding=1)

    def forward(self, x):
        y = torch.nn.functional.silu(self.a(x)) * 0.5
        return torch.tanh(self.b(y)) + 1.0


def get_inputs():
    return [torch.randn(2, 2, 4, 5, 6)]


def get_init_inputs():
    return []
"""


# VGG's shape: convolutions and ReLUs with a max pool (and an average pool) between them. 5 x 7 positions
# after the first pool: its windows of 3 with padding 1 reach past the edges.
VGG = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Conv2d(3, 6, 3, padding=1)
        self.b = nn.Conv2d(6, 9, 3, padding=1)
        self.c = nn.Conv2d(9, 4, 1)

    def forward(self, x):
        y = nn.functional.max_pool2d(torch.relu(self.a(x)), kernel_size=3, stride=2, padding=1)
        y = nn.functional.avg_pool2d(torch.relu(self.b(y)), kernel_size=2, stride=1)
        return torch.sigmoid(self.c(y))


def get_inputs():
    return [torch.randn(2, 3, 9, 13)]


def get_init_inputs():
    return []
"""


# MobileNet's shape: a depthwise 3x3 convolution and a pointwise 1x1 one, each with BatchNorm and ReLU6; then a
# convolution in groups of two channels.
MOBILE = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 3, stride=2, padding=1, bias=False)
        self.dw = nn.Conv2d(8, 8, 3, padding=1, groups=8, bias=False)
        self.bn1 = nn.BatchNorm2d(8)
        self.pw = nn.Conv2d(8, 12, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(12)
        self.grouped = nn.Conv2d(12, 12, 3, padding=1, groups=6)
        for m in self.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.uniform_(-0.5, 0.5)
                m.running_var.uniform_(0.5, 2.0)

    def forward(self, x):
        x = torch.relu(self.stem(x))
        x = nn.functional.relu6(self.bn1(self.dw(x)))
        x = nn.functional.relu6(self.bn2(self.pw(x)))
        return torch.relu(self.grouped(x)).mean(dim=(2, 3))


def get_inputs():
    return [torch.randn(2, 3, 13, 11)]


def get_init_inputs():
    return []
"""


# SqueezeNet's fire modules: a 1x1 squeeze, then 1x1 and 3x3 expansions concatenated along the channels; a pool
# between two modules. 5 and 3 channels in the expansions: the cat's boundary falls inside a chunk of 4.
FIRE = """
import torch
import torch.nn as nn


class Fire(nn.Module):
    def __init__(self, cin, squeeze, e1, e3):
        super().__init__()
        self.squeeze = nn.Conv2d(cin, squeeze, 1)
        self.e1 = nn.Conv2d(squeeze, e1, 1)
        self.e3 = nn.Conv2d(squeeze, e3, 3, padding=1)

    def forward(self, x):
        x = torch.relu(self.squeeze(x))
        return torch.cat([torch.relu(self.e1(x)), torch.relu(self.e3(x))], 1)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 6, 3)
        self.f1 = Fire(6, 4, 5, 3)
        self.f2 = Fire(8, 3, 4, 4)
        self.head = nn.Conv2d(8, 2, 1)

    def forward(self, x):
        x = nn.functional.max_pool2d(torch.relu(self.stem(x)), 2, ceil_mode=False)
        x = nn.functional.max_pool2d(self.f1(x), 3, stride=2, padding=1)
        return torch.flatten(nn.functional.adaptive_avg_pool2d(torch.relu(self.head(self.f2(x))), 1), 1)


def get_inputs():
    return [torch.randn(2, 3, 15, 17)]


def get_init_inputs():
    return []
"""


def _program(source: str, **kw):
    from stitch_lsp.worker.trace_handler import trace_task

    reply = trace_task(source)
    assert reply.ok, reply.message
    return lower(reply.graph, **kw)


def _steps(program) -> tuple[list[dict], list[dict]]:
    steps = program_data(program)["steps"]
    return ([s for s in steps if s.get("op") == "aten.convolution.default"], [s for s in steps if "kernel" in s])


def test_the_kernels_between_convolutions_read_and_write_channels_last(tmp_path, monkeypatch):
    program = _program(RESNET)
    convs, kernels = _steps(program)
    # The stem's tail runs in channels-last too: every convolution after the stem takes its input as it lies.
    assert [bool(c.get("layout")) for c in convs] == [True] * 6, program.notes
    assert [c["name"] for c in convs if c.get("convert")] == ["convolution_nobias"], "only forward's input is converted"
    written = [o[0] for k in kernels for o in k["outputs"] if len(o) > 3]
    assert len(written) == 4 and all(o[3] == "channels_last" for k in kernels for o in k["outputs"] if len(o) > 3)
    # The residual adds read the block's input in channels-last beside the convolution's output.
    assert sum(len(k.get("layouts", {})) == 2 for k in kernels) == 2, kernels
    # The global pool reads the last block's output in its own order; its result is NCHW's bytes.
    assert "channels-last as it lies" in " ".join(program.notes)
    monkeypatch.setattr(host, "_driver", rows._driver)
    host.check_against_eager(RESNET, program, ("random", "nan"), tmp_path)


def test_a_three_d_chain_returns_nchw(tmp_path, monkeypatch):
    program = _program(CONV3D)
    convs, kernels = _steps(program)
    assert [c.get("layout") for c in convs] == ["channels_last_3d"] * 2
    assert [bool(c.get("convert")) for c in convs] == [True, False]
    first, last = kernels[-2], kernels[-1]
    assert first["outputs"][0][3:] == ["channels_last_3d"]
    assert len(last["outputs"][0]) == 3, "the returned value is written NCHW"
    monkeypatch.setattr(host, "_driver", rows._driver)
    host.check_against_eager(CONV3D, program, ("random", "nan"), tmp_path)


def test_a_reader_that_takes_nchw_breaks_the_chain():
    """A softmax over the channels reads NCHW: the kernel before it writes NCHW, as it did alone."""
    source = CONV3D.replace("torch.tanh(self.b(y)) + 1.0", "torch.softmax(self.b(y), dim=1), y")
    program = _program(source)
    convs, kernels = _steps(program)
    assert all(len(o) == 3 for k in kernels for o in k["outputs"]), "y is returned: written NCHW"
    assert "its output is read by more than one step" not in " ".join(program.notes)
    assert _program(RESNET, channels_last=False).written_channels_last == {}


def _run_module(source: str, tmp_path, x):
    """The generated module, its kernels built for the host: (its output, eager's, whether each convolution got
    a channels-last input, the shapes PyTorch copied, the kernels loaded)."""
    ref, cand, kernels = host_models(source, _program(source), tmp_path)
    seen: list[bool] = []
    copies: list[tuple] = []

    class Spy(torch.utils._python_dispatch.TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func is torch.ops.aten.convolution.default:
                seen.append(args[0].is_contiguous(memory_format=torch.channels_last))
            elif func in (torch.ops.aten.clone.default, torch.ops.aten.copy_.default):
                copies.append(tuple(args[0].shape))
            return func(*args, **(kwargs or {}))

    with torch.no_grad():
        want = ref(x)
        with Spy():
            got = cand(x)
    return got, want, seen, copies, kernels


def test_generated_module_keeps_the_chain_and_returns_nchw(tmp_path):
    got, want, seen, copies, kernels = _run_module(RESNET, tmp_path, torch.randn(2, 3, 9, 11))
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
    assert seen == [True] * 6
    # No activation is copied between layouts by PyTorch: the one transpose is the program's own kernel
    # (forward's input); the weights' conversions are the only copies.
    assert all(len(shape) == 4 and shape[0] in (6, 10) for shape in copies), copies
    assert [k.launches for k in kernels if k.kind == "layout"] == [1]


def test_an_input_two_convolutions_read_is_converted_once_and_the_output_returned_nchw(tmp_path):
    """The residual block's input feeds its first convolution and the downsampling one; its output is the
    last kernel's, written channels-last and copied back."""
    got, want, seen, copies, kernels = _run_module(BLOCK, tmp_path, torch.randn(2, 6, 9, 11))
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
    assert got.is_contiguous() and seen == [True] * 3
    assert [k.launches for k in kernels if k.kind == "layout"] == [1, 1], "forward's input in, the output out"
    assert all(len(shape) == 4 and shape[0] in (10,) for shape in copies), copies


def test_pools_between_convolutions_run_in_channels_last(tmp_path, monkeypatch):
    program = _program(VGG)
    convs, kernels = _steps(program)
    assert [bool(c.get("layout")) for c in convs] == [True] * 3, program.notes
    assert [bool(c.get("convert")) for c in convs] == [True, False, False]
    pools = [k for k in kernels if any(o[3:] == ["channels_last"] for o in k["outputs"])]
    assert len(pools) == 2, "both pools (with the ReLU before each) write channels-last"
    assert sum("max_pool2d" in n or "avg_pool2d" in n for n in program.notes if "writes its output so" in n) == 2
    # The notes give each pool's shapes as the code has them, not in the kernel's own order.
    assert any("max_pool2d [2, 6, 9, 13] -> [2, 6, 5, 7]" in n for n in program.notes), program.notes
    monkeypatch.setattr(host, "_driver", rows._driver)
    host.check_against_eager(VGG, program, ("random", "nan", "inf"), tmp_path)


def test_depthwise_convolutions_chain_and_grouped_ones_keep_nchw(tmp_path, monkeypatch):
    program = _program(MOBILE)
    convs, kernels = _steps(program)
    assert [c.get("layout", "") for c in convs] == ["channels_last"] * 3 + [""], program.notes
    assert [bool(c.get("convert")) for c in convs] == [True, False, False, False]
    assert any("a grouped convolution keeps cuDNN's NCHW kernels" in n for n in program.notes), program.notes
    monkeypatch.setattr(host, "_driver", rows._driver)
    host.check_against_eager(MOBILE, program, ("random", "nan"), tmp_path)


def test_a_cat_along_the_channels_chains(tmp_path, monkeypatch):
    program = _program(FIRE)
    convs, kernels = _steps(program)
    assert [bool(c.get("layout")) for c in convs] == [True] * 8, program.notes
    assert [bool(c.get("convert")) for c in convs] == [True] + [False] * 7
    assert not any("writes NCHW" in n for n in program.notes), program.notes
    monkeypatch.setattr(host, "_driver", rows._driver)
    host.check_against_eager(FIRE, program, ("random", "nan"), tmp_path)


# Blocks whose output forward returns: a residual block with a downsampling branch (the last kernel reads both
# convolutions), and a fire module (a cat of two convolutions' ReLUs).
BLOCK = RESNET.replace(
    "        x = torch.relu(self.stem(x))\n        x = self.blocks(x)\n"
    "        return torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1)",
    "        return self.blocks[1](x)").replace("torch.randn(2, 3, 9, 11)", "torch.randn(2, 6, 9, 11)")
FIRE_ALONE = FIRE.replace(
    "        x = nn.functional.max_pool2d(torch.relu(self.stem(x)), 2, ceil_mode=False)\n"
    "        x = nn.functional.max_pool2d(self.f1(x), 3, stride=2, padding=1)\n"
    "        return torch.flatten(nn.functional.adaptive_avg_pool2d(torch.relu(self.head(self.f2(x))), 1), 1)",
    "        return self.f1(x)").replace("torch.randn(2, 3, 15, 17)", "torch.randn(2, 6, 7, 9)")


@pytest.mark.parametrize("name", ["residual-block", "fire-module"])
def test_a_returned_chain_is_copied_back_to_nchw(name, tmp_path, monkeypatch):
    source = {"residual-block": BLOCK, "fire-module": FIRE_ALONE}[name]
    assert source not in (RESNET, FIRE)
    program = _program(source)
    convs, kernels = _steps(program)
    assert all(c.get("layout") for c in convs), program.notes
    data = program_data(program)
    (back,) = [k for k in kernels if k["kernel"].startswith("stitch_layout_") and k.get("layouts")]
    assert data["outputs"] == [back["outputs"][0][0]] and len(back["outputs"][0]) == 3
    assert any("written back in NCHW" in n for n in program.notes)
    monkeypatch.setattr(host, "_driver", rows._driver)
    host.check_against_eager(source, program, ("random", "nan"), tmp_path)


# Convolutions down to one position, then flattened into a linear layer: (N, C, 1, 1) is the same bytes in both
# layouts, so the flatten reads the chain's last output as it lies.
FLAT = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Conv2d(3, 8, 3, stride=2, padding=1)
        self.b = nn.Conv2d(8, 12, 3, stride=2)
        self.c = nn.Conv2d(8, 12, 3, stride=2, bias=False)
        self.fc = nn.Linear(12, 5)

    def forward(self, x):
        h = torch.relu(self.a(x))
        return self.fc(torch.flatten(torch.relu(self.b(h) + self.c(h)), 1))


def get_inputs():
    return [torch.randn(2, 3, 6, 6)]


def get_init_inputs():
    return []
"""


def test_a_chain_may_end_where_both_layouts_are_the_same_bytes(tmp_path, monkeypatch):
    program = _program(FLAT)
    convs, kernels = _steps(program)
    assert [c.get("layout") for c in convs] == ["channels_last"] * 3, program.notes
    assert [bool(c.get("convert")) for c in convs] == [True, False, False]
    # The add of the two branches runs in the chain: no tail writes NCHW, no branch is copied by PyTorch.
    assert not any("writes NCHW" in n for n in program.notes), program.notes
    assert sum(len(k.get("layouts", {})) for k in kernels) == 1, kernels  # (N, 12, 1, 1) reads as it lies
    monkeypatch.setattr(host, "_driver", rows._driver)
    host.check_against_eager(FLAT, program, ("random", "nan"), tmp_path)


def test_the_binding_allocates_outputs_in_the_layout_asked_and_zeroes_those_asked():
    """The module's interpreter: an output written in channels-last is allocated so, a zeroed one (a team
    kernel's arrival counts) reads zero at launch, whatever its layout."""
    import json

    from stitch_lsp.coders.template import binding

    ns: dict = {"torch": torch, "json": json, "prefetch_kernels": lambda kernels: 0}
    exec(binding._RUNTIME, ns)
    seen: list = []

    class Kernel:
        def __call__(self, grid, block, args, **kw):
            seen.extend((t.stride(), t.clone()) for t in args[1:])

    ns["load_kernel"] = lambda source, name: Kernel()
    data = {"inputs": ["x"], "outputs": ["o", "z"], "tuple": True, "sources": {"k": "// k"},
            "steps": [{"kernel": "k", "grid": 1, "block": 32, "args": ["x"], "zeroed": ["z", "o"],
                       "outputs": [["o", [2, 3, 4, 5], "float32", "channels_last"], ["z", [7], "int32"]]}]}
    out = ns["_Prepared"](data)([torch.ones(3)])
    assert out[0].is_contiguous(memory_format=torch.channels_last) and not out[0].is_contiguous()
    assert seen[0][0] == (60, 1, 15, 3) and not seen[0][1].any() and not seen[1][1].any()


# The CPU's own bf16 convolution in channels-last places NaN otherwise than its NCHW one (eager run both ways
# differs in 4 places on VGG's NaN inputs): the NaN case there judges the CPU library, not the kernels.
@pytest.mark.parametrize("precision, cases", [("bf16", ("random",)), ("fp16", ("random", "nan"))])
def test_a_chain_in_half_precision_matches_eager(precision, cases, tmp_path, monkeypatch):
    from stitch_lsp.task.precision import cast_source

    source = cast_source(VGG, precision)
    program = _program(source)
    convs, kernels = _steps(program)
    assert [bool(c.get("layout")) for c in convs] == [True] * 3, program.notes
    assert {o[2] for k in kernels for o in k["outputs"]} == {"bfloat16" if precision == "bf16" else "float16"}
    monkeypatch.setattr(host, "_driver", rows._driver)
    host.check_against_eager(source, program, cases, tmp_path)
