"""Views that move elements rather than reinterpret them, in the template Coder's kernels:

- ``Tensor.unfold`` (windows of a dimension as a new last one: a vision transformer's patches) and ``F.pad`` with a
  constant (Mamba's segment sums pad a cumulative sum) are read through index maps, as slices and flips are,
  instead of stopping the plan;
- ``torch.roll`` (a shifted window's cyclic shift) likewise, kept whole by the trace instead of decomposed
  into an arange, an fmod and an index_select;
- a copy at the end of a graph (a concatenation of a convolution's output with the block's input, a flip or a
  repeat of a GEMM's output, a pad) is a kernel, not left to PyTorch: left there, the candidate's forward calls
  ``torch.cat`` and the Verifier's anti-hacking guard rightly calls that PyTorch work;
- a traced ``clone`` (``.contiguous()`` of transposed heads, the copies a batched GEMM's strided operands need) is
  a kernel too, not PyTorch's strided copy.

Each program is built for the host and run against eager PyTorch on the CPU, as
tests/agents/test_template_patterns_host.py runs its patterns.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from stitch_lsp.coders import ATTENTION_LIBRARY  # noqa: E402
from stitch_lsp.coders.template import lower  # noqa: E402
from stitch_lsp.plan import op_table  # noqa: E402
from tests.agents import test_template_pointwise_host as host  # noqa: E402
from tests.agents import test_template_rows_host as rows  # noqa: E402
from tests.agents.test_view_strides import HEADS_BACK  # noqa: E402

pytestmark = [pytest.mark.timeout(600),
              pytest.mark.skipif(host.GXX is None or host.INCLUDE is None, reason="needs g++ and the CUDA headers")]

HEAD = """
import torch
import torch.nn as nn
import torch.nn.functional as F
"""

MODELS = {
    # Patches of an image, flattened to a sequence and projected, with a position embedding added after.
    "patches-then-linear": """
class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(3 * 4 * 4, 8)
        self.pos = nn.Parameter(torch.randn(1, 6, 8))

    def forward(self, img):
        p = 4
        x = img.unfold(2, p, p).unfold(3, p, p).reshape(img.shape[0], -1, p * p * img.shape[1])
        return self.proj(torch.relu(x)) + self.pos

def get_inputs():
    return [torch.randn(2, 3, 8, 12)]

def get_init_inputs():
    return []
""",
    # Overlapping windows (step below size) and a window that does not reach the end, on a middle dimension.
    "overlapping-windows": """
class Model(nn.Module):
    def forward(self, x):
        return torch.sigmoid(x.unfold(1, 3, 2)) * 2.0 - x.sum()

def get_inputs():
    return [torch.randn(2, 8, 5)]

def get_init_inputs():
    return []
""",
    # One before on the last dimension (Mamba's), then a cumulative sum and an exponential over it.
    "pad-then-cumsum": """
class Model(nn.Module):
    def forward(self, a):
        return torch.exp(torch.cumsum(F.pad(a[:, :, -1], (1, 0)), dim=-1) * 0.5)

def get_inputs():
    return [torch.randn(2, 3, 5, 4)]

def get_init_inputs():
    return []
""",
    # Two dimensions padded with a value on both sides, one cropped (a negative pad), inside a pointwise chain.
    "pad-and-crop": """
class Model(nn.Module):
    def forward(self, x):
        return torch.tanh(F.pad(x * 2.0, (2, 1, -1, 3), value=-1.5)) + 1.0

def get_inputs():
    return [torch.randn(2, 6, 5)]

def get_init_inputs():
    return []
""",
    # Padding as the last step, after a GEMM: a copy kernel of its own.
    "linear-then-pad": """
class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(6, 4)

    def forward(self, x):
        return F.pad(self.lin(x), (1, 2))

def get_inputs():
    return [torch.randn(5, 6)]

def get_init_inputs():
    return []
""",
    # A dense block's last step: the input and the features a convolution made, side by side along the channels.
    "conv-then-cat": """
class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(4, 3, 3, padding=1, bias=False)

    def forward(self, x):
        y = self.conv(x)
        return torch.cat([x, y, y], 1)

def get_inputs():
    return [torch.randn(2, 4, 5, 6)]

def get_init_inputs():
    return []
""",
    "linear-then-flip": """
class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(12, 10)

    def forward(self, x):
        return torch.flip(self.lin(x), [0, 1])

def get_inputs():
    return [torch.randn(7, 12)]

def get_init_inputs():
    return []
""",
    "linear-then-repeat": """
class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 6)

    def forward(self, x):
        return self.lin(x).repeat(2, 3)

def get_inputs():
    return [torch.randn(5, 8)]

def get_init_inputs():
    return []
""",    # A concatenation whose result is only reshaped into an output: a copy inside a group of views.
    "cat-then-reshape": """
class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(6, 4)

    def forward(self, x, y):
        return self.lin(x), torch.cat([x, y], 1).reshape(-1)

def get_inputs():
    return [torch.randn(3, 6), torch.randn(3, 4)]

def get_init_inputs():
    return []
""",
    # A shifted window's cyclic shift (Swin), both ways, inside a pointwise chain: read through an index map.
    "roll-shift-windows": """
class Model(nn.Module):
    def forward(self, x):
        shifted = torch.roll(torch.tanh(x), shifts=(-2, -3), dims=(1, 2))
        return torch.roll(shifted * 2.0 + 1.0, shifts=(2, 3), dims=(1, 2)) - x

def get_inputs():
    return [torch.randn(2, 7, 9, 3)]

def get_init_inputs():
    return []
""",
    # No dimension named: the flattened tensor rolls; a shift longer than the tensor wraps.
    "roll-flattened": """
class Model(nn.Module):
    def forward(self, x):
        return torch.sigmoid(torch.roll(x * 3.0, 40))

def get_inputs():
    return [torch.randn(3, 11)]

def get_init_inputs():
    return []
""",
    # A roll as the last step, after a GEMM: a copy kernel of its own.
    "linear-then-roll": """
class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 6)

    def forward(self, x):
        return torch.roll(self.lin(x), shifts=(1, -2), dims=(0, -1))

def get_inputs():
    return [torch.randn(5, 8)]

def get_init_inputs():
    return []
""",
    # Attention scores of heads split from one projection: neither operand of the batched GEMM can be a strided
    # batch, so each is copied (q's rows kept, k transposed).
    "scores-of-split-heads": """
class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.qk = nn.Linear(12, 24)

    def forward(self, x):
        q, k = self.qk(x).split(12, dim=2)
        q, k = (z.view(2, 6, 3, 4).transpose(1, 2) for z in (q, k))
        att = (q @ k.transpose(-2, -1)) * 0.25
        return torch.softmax(att, dim=-1)

def get_inputs():
    return [torch.randn(2, 6, 12)]

def get_init_inputs():
    return []
""",
}
# Heads back together: a batched GEMM's result transposed, made contiguous, viewed, projected.
MODELS["heads-back"] = HEADS_BACK

# The op each case is about: it must run inside a kernel.
PAD, UNFOLD, ROLL = "aten.constant_pad_nd.default", "aten.unfold.default", "aten.roll.default"
OP = {"patches-then-linear": UNFOLD, "overlapping-windows": UNFOLD, "pad-then-cumsum": PAD, "pad-and-crop": PAD,
      "linear-then-pad": PAD, "conv-then-cat": "aten.cat.default", "linear-then-flip": "aten.flip.default",
      "linear-then-repeat": "aten.repeat.default", "cat-then-reshape": "aten.cat.default",
      "roll-shift-windows": ROLL, "roll-flattened": ROLL, "linear-then-roll": ROLL,
      "heads-back": "aten.clone.default", "scores-of-split-heads": "aten.clone.default"}


@pytest.mark.parametrize("name", sorted(MODELS))
def test_a_moving_view_runs_in_a_kernel_and_matches_eager(name, tmp_path, monkeypatch):
    from stitch_lsp.worker.trace_handler import trace_task

    source = HEAD + MODELS[name]
    reply = trace_task(source)
    assert reply.ok, reply.message
    assert any(n.op == OP[name] for n in reply.graph.nodes)
    # Scores of split heads: as the attention kernel's fallback lowers them (the scores GEMM and a softmax kernel),
    # where the copy of the heads for the GEMM is the view at issue; else the probabilities' kernel reads them.
    program = lower(reply.graph, attention=ATTENTION_LIBRARY if name == "scores-of-split-heads" else True)
    assert program.covered, program.blocking_ops
    index = reply.graph.index()
    in_kernels = {n for step in program.steps if step.kernel is not None for n in step.nodes}
    assert any(index[n].op == OP[name] for n in in_kernels), [s.nodes for s in program.steps]
    left_to_torch = [index[n].op for step in program.steps if step.kernel is None for n in step.nodes]
    assert not set(left_to_torch) & op_table.COPYING_VIEW_OPS, left_to_torch
    monkeypatch.setattr(host, "_driver", rows._driver)
    host.check_against_eager(source, program, ("random", "nan"), tmp_path)
