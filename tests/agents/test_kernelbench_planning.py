"""How the Planner and the template Coder cut the field's tasks (our own small reproductions), without running
kernels: reductions over any dimensions, domains split into stages, few long rows split across blocks, library
calls with their tail fused, and the ops the tracer keeps whole."""

from __future__ import annotations

import json

import pytest

from stitch_lsp.plan.planner import make_plan
from stitch_lsp.plan.reduction_domain import broadcasts_per_row, domain_of
from stitch_lsp.coders.template import TemplateCoder, library_call, lower
from stitch_lsp.coders.template.kernels import KernelSpec
from stitch_lsp.coders.template.program import program_data
from stitch_lsp.coders.template.reduction_kernels import cluster_for, split_for, team_for
from stitch_lsp.pipeline import Task

torch = pytest.importorskip("torch")
trace_handler = pytest.importorskip("stitch_lsp.worker.trace_handler")

HEAD = """
import torch
import torch.nn as nn
import torch.nn.functional as F
"""


def _trace(body: str):
    source = HEAD + body
    reply = trace_handler.trace_task(source)
    assert reply.ok, reply.message
    return source, reply.graph


def test_domains_say_where_rows_lie():
    nchw = (4, 3, 5, 6)
    channels = domain_of(nchw, [1])  # softmax over the channels: rows side by side
    assert (channels.layout, channels.rows, channels.row_len, channels.inner) == ("columns", 120, 3, 30)
    stats = domain_of(nchw, [0, 2, 3])  # BatchNorm's statistics: a few rows of N runs of H x W
    assert (stats.layout, stats.rows, stats.row_len, stats.run) == ("runs", 3, 120, 30)
    assert domain_of((1, 12, 5, 6), [0, 2, 3]).layout == "rows"  # InstanceNorm as BatchNorm of one sample
    # Each element's own row value, and nothing else, broadcasts per row.
    assert broadcasts_per_row((4, 1, 5, 6), nchw, channels)
    assert not broadcasts_per_row((1, 3, 1, 1), nchw, channels)
    assert broadcasts_per_row((1, 3, 1, 1), nchw, stats) and not broadcasts_per_row((3,), nchw, stats)
    # The index map, checked against torch's own permute.
    x = torch.arange(120 * 3).reshape(nchw)
    rows = x.permute(0, 2, 3, 1).reshape(120, 3)
    assert all(channels.element_py(r, j) == rows[r, j] for r in range(120) for j in range(3))


def test_split_rows_only_where_idle_sms_cost_more_than_rereading():
    # 128 softmax rows held in registers fill 128 of 132 SMs: reading them three times would cost more.
    assert split_for(128, 16384, 4, 128, passes=2, full_outputs=True) is None
    # LayerNorm over a (64, 256, 256) image, batch 16: 16 blocks on 132 SMs.
    ln = split_for(16, 64 * 256 * 256, 4, 16, passes=1, full_outputs=True, streamed=True)
    assert ln is not None and 16 * ln.parts >= 132 and ln.chunk % 4 == 0 and ln.parts * ln.chunk >= 64 * 256 * 256
    assert split_for(1, 1 << 24, 4, 1, passes=1, full_outputs=False) is not None  # a loss over everything
    assert split_for(4, 1024, 4, 4) is None  # small: the launches would cost more than they win


def test_long_rows_go_to_a_team_a_cluster_or_a_stream_by_what_holds_them():
    # KernelBench's L2 norm (32768 rows of 65535): a team of 3, each block double-buffering a third of a row.
    team = team_for(32768, 65535, 1, leaves=1, streamed=True)
    assert team is not None and team.team and team.parts == 3 and team.chunk * 3 >= 65535
    # Two inputs need twice the shared memory: rows of 40000 take a team of 2 alone, of 4 with a second input.
    assert team_for(32768, 40000, 4, leaves=1, streamed=True).parts == 2
    assert team_for(32768, 40000, 4, leaves=2, streamed=True).parts == 4
    assert team_for(32768, 65535, 1, leaves=2, streamed=True) is None
    # Rows a block holds in registers, rows too long for four blocks' shared memory (InstanceNorm's 1 MB),
    # and too few rows for every team to take 64 (level 2's GroupNorm of 1024 rows of 59400): no team.
    assert team_for(32768, 16384, 4, leaves=1, streamed=False) is None
    assert team_for(7168, 262144, 4, leaves=1, streamed=True) is None
    assert team_for(1024, 59400, 4, leaves=1, streamed=True) is None
    # InstanceNorm's rows: a cluster of 8 blocks of 1024 threads, 32 values a thread in registers.
    inst = cluster_for(7168, 262144, 4, passes=1, full_outputs=True, blocks=7168)
    assert (inst.parts, inst.threads, inst.shared, inst.team) == (8, 1024, False, False)


def test_a_team_kernel_reads_its_staged_part_and_divides_by_a_reciprocal():
    source, graph = _trace("""
class Model(nn.Module):
    def forward(self, x):
        return x / torch.norm(x, p=2, dim=1, keepdim=True)

def get_inputs():
    return [torch.rand(32768, 65535)]

def get_init_inputs():
    return []
""")
    program = lower(graph)
    (kernel,) = program.kernels
    assert kernel.team == 3 and kernel.zeroed == [f"{kernel.name}_sync"] and kernel.grid == 32768 * 3
    assert "a team of 3 blocks" in kernel.note
    # Double-buffered parts of 21845 values (plus the 16-byte span around them) in dynamic shared memory.
    assert kernel.shared == 2 * 4 * 21856
    body = kernel.source.split('extern "C"')[1]
    assert body.count("stitch_stage_row(") == 2 and "stitch_team_wait(" in body
    # Elements come from the staged part, never from global memory; the norm's reciprocal is taken once a row.
    assert "stitch_ld(in0" not in body and "stitch_div" not in body and "rcp_" in body
    # The binding learns to launch it cooperatively, with a zeroed count of arrivals.
    (step,) = [s for s in program_data(program)["steps"] if "kernel" in s]
    assert step["team"] == 3 and step["zeroed"] == [f"{kernel.name}_sync"] and step["shared"] == kernel.shared


def test_groups_of_megabytes_go_to_a_lagged_kernel_that_reads_them_once():
    # KernelBench's GroupNorm: 896 groups of 8 MB, too long for a cluster's or a team's shared memory.
    source, graph = _trace("""
class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.gn = nn.GroupNorm(8, 64)

    def forward(self, x):
        return self.gn(x)

def get_inputs():
    return [torch.rand(112, 64, 512, 512)]

def get_init_inputs():
    return []
""")
    program = lower(graph)
    (kernel,) = program.kernels
    # One block an SM (992 threads: 28 warps of consumers, a producer, a publisher, a gatherer), a ring of seven
    # tiles of 7168 values (plus the 16-byte span around them), launched cooperatively with at least 49 blocks
    # (a row's 293 tiles over 6 slots), a zeroed count of each row's blocks.
    assert (kernel.team, kernel.grid, kernel.block, kernel.least_blocks) == (1, 132, 992, 49)
    assert kernel.shared == 7 * 4 * 7176 and kernel.zeroed == [f"{kernel.name}_sync"]
    assert "tiles of 7168" in kernel.note and "one read of each element" in kernel.note
    body = kernel.source.split('extern "C"')[1]
    # Elements come from the ring; no warp waits at a block-wide barrier after the mbarriers' set-up.
    assert body.count("stitch_ring_copy(") == 1 and body.count("__syncthreads()") == 1
    assert "stitch_count_release(" in body and "stitch_count_wait(" in body
    (step,) = [s for s in program_data(program)["steps"] if "kernel" in s]
    assert (step["team"], step["least"], step["shared"]) == (1, 49, kernel.shared)
    # InstanceNorm's rows of 1 MB stay with the cluster that holds them in registers.
    source, graph = _trace("""
class Model(nn.Module):
    def forward(self, x):
        return F.instance_norm(x)

def get_inputs():
    return [torch.rand(112, 64, 512, 512)]

def get_init_inputs():
    return []
""")
    (kernel,) = lower(graph).kernels
    assert "__cluster_dims__(8" in kernel.source and not kernel.least_blocks


def test_batchnorm_with_batch_statistics_is_split_rows_with_its_running_statistics():
    source, graph = _trace("""
class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(64))
        self.bias = nn.Parameter(torch.zeros(64))
        self.register_buffer("running_mean", torch.zeros(64))
        self.register_buffer("running_var", torch.ones(64))

    def forward(self, x):
        y = F.batch_norm(x, self.running_mean, self.running_var, self.weight, self.bias, training=True)
        return torch.relu(y) * 2.0

def get_inputs():
    return [torch.randn(32, 64, 128, 128)]

def get_init_inputs():
    return []
""")
    program = lower(graph)
    assert program.covered and not program.library_calls
    notes = " ".join(k.note for k in program.kernels)
    assert "runs" in notes and "split into" in notes, notes
    # 64 channels of 32 x 128 x 128: partial statistics of each part, the statistics and the running-statistics
    # update from them (a block per channel), then the normalised ReLU output in one pointwise pass.
    partials, finish, out = program.kernels[-3:]
    assert partials.scratch and finish.kind == "row_reduction" and finish.grid == 64
    assert out.kind == "pointwise" and out.outputs == graph.outputs
    updates = [s for s in program.steps if s.why == "updates a buffer in place"]
    assert len(updates) == 2  # running mean and variance


def test_a_norm_then_a_mean_is_cut_into_stages_that_recompute_rather_than_reread():
    source, graph = _trace("""
class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.gn = nn.GroupNorm(4, 16)

    def forward(self, x):
        return torch.tanh(self.gn(x)).mean(dim=[1, 2, 3])

def get_inputs():
    return [torch.randn(8, 16, 32, 32)]

def get_init_inputs():
    return []
""")
    program = lower(graph)
    assert program.covered
    groups = [g for g in program.groups if g.kind.endswith("reduction")]
    assert len(groups) == 2
    first, second = groups
    # Only the statistics pass between the stages; the normalised values are recomputed, never written.
    assert set(second.inputs) - {i.name for i in graph.inputs} <= set(first.outputs)
    assert all(graph.index()[o].numel <= 8 * 4 for o in first.outputs)
    assert second.recomputed


def test_convolution_stays_a_library_call_and_its_tail_is_one_kernel():
    source, graph = _trace("""
class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(16, 32, 3)

    def forward(self, x):
        y = self.conv(x)
        return torch.sigmoid(y - y.mean(dim=1, keepdim=True)) * 0.5

def get_inputs():
    return [torch.randn(4, 16, 34, 34)]

def get_init_inputs():
    return []
""")
    plan = make_plan(Task(name="t", source=source), graph)
    kinds = [g.kind for g in plan.groups if g.kind != "view"]
    assert kinds == ["conv", "col_reduction"], kinds
    conv = next(g for g in plan.groups if g.kind == "conv")
    assert conv.covered and "cuDNN" in conv.note and conv.flops == 2 * 4 * 32 * 32 * 32 * 16 * 9
    candidate = TemplateCoder().generate(Task(name="t", source=source), plan)
    assert candidate.library_calls and not candidate.blocking_ops and len(candidate.cuda_sources) == 1


def test_a_registered_lowering_replaces_the_library_call(monkeypatch):
    """The seam a GEMM / convolution kernel family plugs into: its kernel runs instead of the library call."""
    source, graph = _trace("""
class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(64, 32)

    def forward(self, x):
        return torch.tanh(self.lin(x))

def get_inputs():
    return [torch.randn(16, 64)]

def get_init_inputs():
    return []
""")
    seen = []

    def ours(group, index, graph_):
        node = library_call.library_op(group, index)
        seen.append(node.op)
        return KernelSpec(name="our_gemm", source="// a GEMM of our own", kind="gemm", params=[group.outputs[0]],
                          outputs=[group.outputs[0]])

    monkeypatch.setitem(library_call.LOWERINGS, "gemm", ours)
    program = lower(graph)
    assert seen == ["aten.addmm.default"] and not program.library_calls
    assert [k.name for k in program.kernels][0] == "our_gemm"


def test_the_tracer_keeps_what_eager_runs_whole():
    """Dropout as the fused kernel eager runs on CUDA (its random numbers), attention as one call, max over a
    dim as a value and a position, numbers passed to forward and made inside it as constants."""
    _, graph = _trace("""
class Model(nn.Module):
    def forward(self, q, k, v, s):
        a = F.scaled_dot_product_attention(q, k, v)
        values, where = torch.max(a, dim=-1)
        return F.dropout(values, 0.25, training=True) + torch.tensor(0.5, device=q.device) * s, where

def get_inputs():
    return [torch.randn(2, 4, 8, 16), torch.randn(2, 4, 8, 16), torch.randn(2, 4, 8, 16), 3.0]

def get_init_inputs():
    return []
""")
    ops = [n.op for n in graph.nodes]
    assert "aten.scaled_dot_product_attention.default" in ops and "aten.native_dropout.default" in ops
    assert "aten.amax.default" in ops and "aten.argmax.default" in ops and "aten.full.default" in ops
    assert "aten.bmm.default" not in ops and "aten.bernoulli.p" not in ops
    assert [(s.index, s.value) for s in graph.scalars] == [(3, 3.0)]
    program = lower(graph)
    # The attention call is a kernel of our own; dropout stays PyTorch's random numbers.
    assert program.covered and len(program.library_calls) == 1
    assert [k.kind for k in program.kernels if k.kind == "attention"] == ["attention"]
    module = TemplateCoder().generate(Task(name="t", source=HEAD), make_plan(Task(name="t", source=HEAD), graph))
    assert "if x3 != 3.0:" in module.module_source  # a call with another number is refused, not miscomputed


def test_cumulative_ops_and_degenerate_reductions_are_covered():
    _, graph = _trace("""
class Model(nn.Module):
    def forward(self, x):
        y = torch.cumsum(x, dim=1) + torch.cumprod(x, dim=0)
        return y.mean(dim=1, keepdim=True).sum(dim=1, keepdim=True)  # the second sum is over one element

def get_inputs():
    return [torch.randn(64, 256)]

def get_init_inputs():
    return []
""")
    program = lower(graph)
    assert program.covered
    kinds = sorted(k.kind for k in program.kernels)
    assert kinds.count("scan") == 2 and "row_reduction" in kinds


def test_a_trace_at_other_shapes_keeps_the_numbers_forward_takes():
    """A model built with other constructor arguments is traced again at its call's tensor shapes: the numbers
    forward takes stay the task's constants, in their places among the tensors."""
    source = HEAD + """
class Model(nn.Module):
    def __init__(self, scale):
        super().__init__()
        self.scale = scale

    def forward(self, x, s, y):
        return x * self.scale + y * s

def get_inputs():
    return [torch.randn(4, 8), 0.5, torch.randn(4, 8)]

def get_init_inputs():
    return [2.0]
"""
    reply = trace_handler.trace_task(source, init=((3.0,), {}), inputs=[([6, 10], "float32"), ([6, 10], "float32")])
    assert reply.ok, reply.message
    assert [(s.index, s.value) for s in reply.graph.scalars] == [(1, 0.5)]
    assert [(i.index, i.shape) for i in reply.graph.inputs if i.role == "input"] == [(0, (6, 10)), (2, (6, 10))]
    assert 3.0 in [v for n in reply.graph.nodes for v in json.loads(n.args_json) if isinstance(v, float)]


def _moved(body: str) -> int:
    source, graph = _trace(body)
    return make_plan(Task(name="t", source=source), graph).bytes_moved


def test_a_tensor_divided_by_its_own_norm_counts_the_second_read_it_cannot_avoid(monkeypatch):
    """The Frobenius norm of 512 MB: every output waits for the last input, long gone from L2, so any kernel
    reads the input twice and the plan's floor says so. The same tensor normalised per 2 MB row (rows that fit
    in L2), or summed beside an output that does not wait for the sum, is counted as before: once."""
    from stitch_lsp.plan import planner

    model = """
class Model(nn.Module):
    def forward(self, x):
        return {expr}

def get_inputs():
    return [torch.rand({shape})]

def get_init_inputs():
    return []
"""
    cases = {"whole": ("x / torch.norm(x, p='fro')", "128, 1024, 1024"),
             "per-row": ("x / torch.norm(x, p=2, dim=1, keepdim=True)", "256, 524288"),
             "beside": ("(torch.relu(x), torch.relu(x).sum())", "128, 1024, 1024")}
    now = {k: _moved(model.format(expr=e, shape=s)) for k, (e, s) in cases.items()}
    monkeypatch.setattr(planner, "H100_L2_BYTES", 1 << 62)  # an L2 that holds anything: no second read
    once = {k: _moved(model.format(expr=e, shape=s)) for k, (e, s) in cases.items()}
    size = 128 * 1024 * 1024 * 4  # bytes of the input
    assert once["whole"] == 2 * size and now["whole"] == 3 * size
    assert now["per-row"] == once["per-row"] == 2 * size
    assert now["beside"] == once["beside"]
