"""The patterns of the field's tasks (KernelBench-like, our own small reproductions) built for the host and run
against eager PyTorch on the CPU: normalisations over the channels of NCHW, BatchNorm in training (its
running statistics too), arg reductions, the level-1 losses, scans, few long rows split across blocks,
a convolution followed by its fused tail, number inputs and constants made inside forward.

Kernels run as tests/agents/test_template_rows_host.py runs them (a host thread per CUDA thread, barriers
and shuffles emulated). ``split`` cases force every reduction along rows into three parts, so the
partial-results kernels and the one that finishes them run at sizes a CPU takes in seconds; ``cluster``
cases hold every row in a cluster of two blocks that exchange their totals through distributed shared
memory (the two blocks run together on the host, each with its own shared memory). ``team`` cases give every row
to a team of two blocks; ``lagged`` cases stream the rows as tiles over three blocks whose warps hand tiles, sums
and row values to one another through emulated mbarriers.
"""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

from stitch_lsp.coders.template import lagged_kernels, lower, reduction_kernels  # noqa: E402
from tests.agents import test_template_pointwise_host as host  # noqa: E402
from tests.agents import test_template_rows_host as rows  # noqa: E402

pytestmark = [pytest.mark.timeout(900),
              pytest.mark.skipif(host.GXX is None or host.INCLUDE is None, reason="needs g++ and the CUDA headers")]

HEAD = """
import torch
import torch.nn as nn
import torch.nn.functional as F
"""

MODELS = {
    # BatchNorm with batch statistics over N, H, W (a few rows of runs; its running statistics updated in place),
    # then a softmax over the channels (rows side by side).
    "batchnorm-channel-softmax": """
class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.rand(6) + 0.5)
        self.bias = nn.Parameter(torch.randn(6))
        self.register_buffer("running_mean", torch.zeros(6))
        self.register_buffer("running_var", torch.ones(6))

    def forward(self, x):
        y = F.batch_norm(x, self.running_mean, self.running_var, self.weight, self.bias, training=True)
        return torch.softmax(y, dim=1) * 2.0 - 0.5

def get_inputs():
    return [torch.randn(3, 6, 5, 8) * 2 + 1]

def get_init_inputs():
    return []
""",
    # Instance norm (rows of H x W), a GroupNorm after it, then a mean over everything but the batch: three
    # domains, the later ones recomputing the normalised values from the statistics.
    "instancenorm-groupnorm-mean": """
class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.inorm = nn.InstanceNorm2d(8)
        self.gn = nn.GroupNorm(4, 8)

    def forward(self, x):
        return self.gn(self.inorm(x) * 1.5).mean(dim=[1, 2, 3])

def get_inputs():
    return [torch.randn(3, 8, 4, 6)]

def get_init_inputs():
    return []
""",
    # max / min over a middle dimension with their positions, argmax over the last, a sum over the first.
    "arg-reductions": """
class Model(nn.Module):
    def forward(self, x):
        values, where = torch.max(x, dim=1)
        low = torch.min(x, dim=1, keepdim=True)[0]
        return values - low.squeeze(1), where, torch.argmax(x, dim=-1), torch.argmin(x * 2.0, dim=0), x.sum(0)

def get_inputs():
    x = torch.randn(5, 7, 12)
    x[1, 3, 4] = x[1, 5, 4] = 9.0  # a tie: the first position wins
    return [x]

def get_init_inputs():
    return []
""",
    # Positions over a long middle dim (each thread walks its column's elements in order, merging each)
    # and over the last: ties go to the first position, NaN wins and the first NaN's position with it, a column
    # of -inf gives position 0.
    "arg-reductions-long": """
class Model(nn.Module):
    def forward(self, x, y):
        values, where = torch.max(x, dim=1)
        return where, torch.argmin(x, dim=1), values, torch.argmax(y, dim=-1), torch.argmin(y, dim=-1)

def get_inputs():
    x = torch.randn(2, 300, 5)
    x[0, 5, 1] = x[0, 250, 1] = 9.0
    x[0, 7, 3] = x[0, 290, 3] = -9.0
    x[1, 270, 2] = x[1, 40, 2] = float("nan")
    x[1, :, 4] = float("-inf")
    y = torch.randn(6, 100)
    y[1, 3] = y[1, 97] = 9.0
    y[2, 10] = y[2, 60] = -9.0
    y[3, 50] = y[3, 20] = float("nan")
    return [x, y]

def get_init_inputs():
    return []
""",
    "losses": """
class Model(nn.Module):
    def forward(self, logits, target, a, b, p, n):
        ce = F.cross_entropy(logits, target)
        kl = F.kl_div(torch.log_softmax(a, dim=-1), torch.softmax(b, dim=-1), reduction="batchmean")
        huber = F.smooth_l1_loss(a, b) + F.huber_loss(a, b, delta=0.5)
        hinge = torch.clamp(1 - a * torch.sign(b), min=0).mean()
        cos = (1 - F.cosine_similarity(a, b, dim=1)).mean()
        triplet = F.triplet_margin_loss(a, p, n, margin=0.5)
        return ce + kl + huber + hinge + cos + triplet + F.mse_loss(a, b)

def get_inputs():
    return [torch.randn(12, 10), torch.randint(0, 10, (12,)), torch.randn(12, 16), torch.randn(12, 16),
            torch.randn(12, 16), torch.randn(12, 16)]

def get_init_inputs():
    return []
""",
    "scans": """
class Model(nn.Module):
    def forward(self, x, mask, w):
        forward_sum = torch.cumsum(x * mask, dim=-1)
        backward_sum = torch.cumsum(x.flip(-1), dim=-1).flip(-1)
        exclusive = torch.cat((torch.zeros_like(x[:, :1]), torch.cumsum(x[:, :-1], dim=1)), dim=1)
        running_product = torch.cumprod(x.view(4, 6, 40) * 0.5 + 1.0, dim=1)
        # Placed three along, after ones: each lane stores the value three lanes below it (the chunk before's).
        after_ones = torch.cat((torch.ones_like(x[:, :3]), torch.cumsum(x[:, :-3] * 2.0, dim=1)), dim=1) + 1.0
        # More rows than elements: a chunk of 32, one element a lane; each lane stores its neighbour's value.
        exclusive_short = torch.cat((torch.zeros_like(w[:, :1]), torch.cumsum(w[:, :-1], dim=1)), dim=1)
        return forward_sum, backward_sum, exclusive, running_product, after_ones, exclusive_short

def get_inputs():
    return [torch.randn(24, 40), torch.rand(24, 40) > 0.5, torch.randn(64, 20)]

def get_init_inputs():
    return []
""",
    # Scans whose results a flip or a cat places in the output, each one kernel that stores every running value
    # at its place: reverse (masked; a product), exclusive (zeros first; ones last), along the last dim with
    # runs of 16 a lane (x: whole vectors stored reversed; y: single elements) and along a middle dim.
    "scans-placed": """
class Model(nn.Module):
    def forward(self, x, mask, y, z):
        backward = torch.cumsum((x * mask).flip(1), dim=1).flip(1)
        backward_product = torch.flip(torch.cumprod(torch.flip(y * 0.01 + 1.0, [-1]), -1), [-1]) * 2.0
        exclusive = torch.cat((torch.zeros_like(x[:, :1]), torch.cumsum(x.narrow(1, 0, x.size(1) - 1), 1)), dim=1)
        shifted = torch.cat((torch.cumprod(y[:, 1:], dim=1), torch.ones_like(y[:, :1])), dim=1) - 1.0
        middle = torch.cumsum(z.flip(1), dim=1).flip(1), torch.cat((torch.zeros_like(z[:, :2]), torch.cumprod(z[:, :-2], 1)), 1)
        return backward, backward_product, exclusive, shifted, *middle

def get_inputs():
    return [torch.randn(2, 256), torch.rand(2, 256) > 0.5, torch.randn(3, 300), torch.randn(4, 7, 10)]

def get_init_inputs():
    return []
""",
    # Few long rows: eager scans them in chunks of 512, so each lane holds 16 neighbouring elements (whole
    # 16-element runs where the row length allows vector loads, single elements where it does not).
    "scans-long-rows": """
class Model(nn.Module):
    def forward(self, x, y):
        return torch.cumsum(x, dim=-1) * 0.5, torch.cumprod(y * 0.01 + 1.0, dim=1)

def get_inputs():
    return [torch.randn(2, 256), torch.randn(3, 300)]

def get_init_inputs():
    return []
""",
    # A convolution (a library call: torch on the CPU here) and its whole tail in kernels: bias, activation,
    # a mean over the channels broadcast back, a residual.
    "conv-tail": """
class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3)
        self.bias = nn.Parameter(torch.randn(8, 1, 1))

    def forward(self, x):
        y = torch.relu(self.conv(x) + self.bias)
        return y - y.mean(dim=1, keepdim=True) + torch.sigmoid(y)

def get_inputs():
    return [torch.randn(2, 3, 9, 10)]

def get_init_inputs():
    return []
""",
    # A number input (traced as a constant the binding checks), a tensor made in forward, a triangle mask.
    "numbers-and-constants": """
class Model(nn.Module):
    def forward(self, x, scale):
        y = torch.minimum(x * scale, torch.tensor(0.25, device=x.device))
        return torch.triu(y) + torch.tril(x, diagonal=-1) * scale

def get_inputs():
    return [torch.randn(9, 9), 3.0]

def get_init_inputs():
    return []
""",
    # Index maps that gather: nearest upsampling (index tensors from arange, truncated to integers), an
    # affine instance norm's repeated weight, and a loss whose decomposition makes an empty tensor for its shape.
    "gathers": """
class Model(nn.Module):
    def forward(self, x):
        up = F.interpolate(x, scale_factor=2, mode="nearest")
        normed = F.instance_norm(x, weight=torch.full((x.shape[1],), 1.5, device=x.device))
        return up * 2.0, normed, F.binary_cross_entropy_with_logits(x, torch.sigmoid(x * 0.5))

def get_inputs():
    return [torch.randn(2, 3, 5, 6)]

def get_init_inputs():
    return []
""",
    # LayerNorm over all of (C, H, W) with two rows, and a norm of the whole tensor: few long rows.
    # Over the 64 channels of NCHW: 32 warps a column, each thread holding its 2 positions in registers.
    "channel-norms-held": """
class Model(nn.Module):
    def forward(self, x):
        rms = x / torch.sqrt(torch.mean(x * x, dim=1, keepdim=True) + 1e-5)
        mu = x.mean(dim=1, keepdim=True)
        z = (x - mu) / torch.sqrt(x.var(dim=1, keepdim=True, unbiased=False) + 1e-5)
        return rms, torch.softmax(x * 2.0, dim=1), z, torch.argmax(x, dim=1)

def get_inputs():
    return [torch.randn(2, 64, 3, 8) * 2 + 0.5]

def get_init_inputs():
    return []
""",
    "few-long-rows": """
class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln = nn.LayerNorm((4, 6, 8))

    def forward(self, x):
        y = self.ln(x)
        return y / torch.norm(y, p="fro"), torch.softmax(x.view(2, -1), dim=-1)

def get_inputs():
    return [torch.randn(2, 4, 6, 8) * 3 + 2]

def get_init_inputs():
    return []
""",
    # A GroupNorm, and an L2 norm beside a maximum over rows of odd length: each row a few tiles (the last one
    # partial) for the lagged kernels (rows that start between 16-byte words in the L2 norm's case).
    "tiled-rows": """
class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.gn = nn.GroupNorm(2, 4)

    def forward(self, x, y):
        return self.gn(x) * 2.0, y / torch.norm(y, p=2, dim=1, keepdim=True) + (torch.amax(y, dim=1, keepdim=True) - y)

def get_inputs():
    return [torch.randn(3, 4, 10, 26) * 3 + 2, torch.randn(5, 1102)]

def get_init_inputs():
    return []
""",
    # Losses: each a single value from two inputs (split, a row's parts are taken in turn by its blocks), and
    # a maximum beside a sum in one pass.
    "losses": """
class Model(nn.Module):
    def forward(self, p, t):
        d = p - t
        return F.mse_loss(p, t), F.smooth_l1_loss(p, t), torch.amax(d.abs()) + torch.sum(d * 0.5)

def get_inputs():
    return [torch.randn(3, 5, 37) * 3 + 2, torch.randn(3, 5, 37)]

def get_init_inputs():
    return []
""",
}

# Models whose scans all store through a flip or a cat: how many kernels (one a scan).
PLACED = {"scans-placed": 6}
# Input cases beyond random values and NaN: an Inf through a running product, reversed and shifted.
EXTRA = {"scans-placed": ("inf",)}

# Which cases also run with every row split into parts (the multi-kernel path): the runs of a BatchNorm, and
# rows that are the whole tensor.
SPLIT = {"batchnorm-channel-softmax", "few-long-rows", "losses"}


# ... and which with every row along its elements held by a cluster of two blocks (distributed shared memory),
# in the blocks' registers and, as rows too long for those are, in their shared memory.
CLUSTER = {"few-long-rows", "arg-reductions"}

# ... and which with every row along its elements taken by a team of two blocks: each stages its part of the
# team's next row in shared memory while it works on this one, and the team meets at a barrier in global memory.
TEAM = {"few-long-rows", "arg-reductions", "losses"}


def _parts(n: int, shared: bool = False, team: bool = False):
    def force(rows_, row_len, vec, *args, **kw):
        chunk = math.ceil(math.ceil(row_len / n) / vec) * vec
        return (reduction_kernels.Split(math.ceil(row_len / chunk), chunk, 64, shared=shared, team=team)
                if row_len > chunk else None)
    return force


# ... and which with every row along its elements taken by the lagged kernel (tiles of 64 VEC-wide chunks, three
# blocks that exchange each row's sums through global memory), where its pass and outputs allow it.
LAGGED = {"tiled-rows", "few-long-rows"}


CASES = ([(name, "") for name in MODELS] + [(name, "split") for name in sorted(SPLIT)]
         + [(name, "cluster") for name in sorted(CLUSTER)] + [(name, "cluster-shared") for name in sorted(CLUSTER)]
         + [(name, "team") for name in sorted(TEAM)] + [(name, "lagged") for name in sorted(LAGGED)])


@pytest.mark.parametrize("name,mode", CASES, ids=[f"{n}{'-' + m if m else ''}" for n, m in CASES])
def test_kernelbench_pattern_matches_eager_on_the_host(name, mode, tmp_path, monkeypatch):
    from stitch_lsp.worker.trace_handler import trace_task

    source = HEAD + MODELS[name]
    reply = trace_task(source)
    assert reply.ok, reply.message
    if mode == "split":
        monkeypatch.setattr(reduction_kernels, "split_for", _parts(3))
    if mode.startswith("cluster"):
        monkeypatch.setattr(reduction_kernels, "cluster_for", _parts(2, shared=mode == "cluster-shared"))
    if mode == "team":
        monkeypatch.setattr(reduction_kernels, "team_for", _parts(2, team=True))
    if mode == "lagged":
        monkeypatch.setattr(reduction_kernels, "row_config", lambda *a: reduction_kernels.RowConfig(64, 64, True))
        monkeypatch.setattr(reduction_kernels, "SMS", 3)
        monkeypatch.setattr(reduction_kernels, "cluster_for", lambda *a, **k: None)
        monkeypatch.setattr(reduction_kernels, "team_for", lambda *a, **k: None)
        monkeypatch.setattr(lagged_kernels, "LAG_THREADS", 64)
        monkeypatch.setattr(lagged_kernels, "LAG_UNROLL", 1)
        monkeypatch.setattr(lagged_kernels, "LAG_MIN_STEPS", 0)  # a block may have no tile at all
        monkeypatch.setattr(lagged_kernels, "LAG_SHARED_BYTES", 8192)
    program = lower(reply.graph)
    assert program.covered, program.blocking_ops
    assert program.kernels
    if mode == "split":
        assert any(k.scratch for k in program.kernels), [k.note for k in program.kernels]
        if name == "losses":  # values alone: the parts' chunks interleaved (block b takes chunks b, b + 3, ...)
            assert any("* 3 + part) *" in k.source for k in program.kernels), [k.note for k in program.kernels]
    if mode.startswith("cluster"):
        assert any("__cluster_dims__(2" in k.source for k in program.kernels), [k.note for k in program.kernels]
        held = [k for k in program.kernels if "STITCH_HELD(stitch_held" in k.source]
        assert bool(held) == (mode == "cluster-shared") and all(k.shared for k in held), \
            [k.note for k in program.kernels]
    if mode == "team":
        teams = [k for k in program.kernels if k.team]
        assert teams and all(k.zeroed and k.shared and "stitch_stage_row(" in k.source for k in teams), \
            [k.note for k in program.kernels]
    if mode == "lagged":
        lagged = [k for k in program.kernels if "lg_steps" in k.source]
        assert lagged and all(k.team == 1 and k.zeroed and k.shared and k.least_blocks for k in lagged), \
            [k.note for k in program.kernels]
    monkeypatch.setattr(host, "_driver", rows._driver)
    if name == "scans":  # the exclusive scans of short rows store whole lines, shifted through the warp
        notes = [k.note for k in program.kernels]
        assert any("stored from 1 element back" in n for n in notes), notes
        assert any("stored from 3 elements back" in n for n in notes), notes
        assert any("chunks of 32 (1 a lane)" in n and "stored from 1 element back" in n for n in notes), notes
    if name == "channel-norms-held":
        notes = [k.note for k in program.kernels]
        assert notes and all("held in registers" in n for n in notes), notes
    if name in PLACED:  # one kernel a scan: the flip or cat after it is its store, not a kernel of its own
        assert len(program.kernels) == PLACED[name], [k.note for k in program.kernels]
        assert all("stored" in k.note for k in program.kernels), [k.note for k in program.kernels]
    # NaN placement is the same code in every shape of kernel: checked once per model, in its own shape.
    host.check_against_eager(source, program, ("random",) if mode else ("random", "nan") + EXTRA.get(name, ()),
                             tmp_path)
