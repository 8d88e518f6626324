"""Max and average pooling as generated kernels, built for the host (g++) and run against eager PyTorch on the
CPU: 1-D to 3-D windows with stride, padding, dilation, ``ceil_mode`` (the extra window clipped at the input's
end), ``count_include_pad`` and ``divisor_override``, odd sizes, half precision, NaN and ±Inf among the inputs
(a max pool propagates NaN; padding never wins), and the pointwise work before and after a pool in its kernel.

Kernels run as tests/agents/test_template_pointwise_host.py runs them (every thread of the launch in turn).
"""

from __future__ import annotations

import re

import pytest

torch = pytest.importorskip("torch")

from stitch_lsp.plan.planner import describe, make_plan  # noqa: E402
from stitch_lsp.coders.template import lower  # noqa: E402
from stitch_lsp.pipeline import Task  # noqa: E402
from tests.agents import test_template_pointwise_host as host  # noqa: E402
from tests.agents import test_template_rows_host as rows  # noqa: E402

pytestmark = [pytest.mark.timeout(900),
              pytest.mark.skipif(host.GXX is None or host.INCLUDE is None, reason="needs g++ and the CUDA headers")]

HEAD = """
import torch
import torch.nn as nn
import torch.nn.functional as F


def get_init_inputs():
    return []
"""

# name -> (forward's body over x, the input's shape, dtype, how many kernels the program has)
MODELS = {
    # Stride 1 with dilation: overlapping windows; the padding at both ends.
    "max1d-dilated": ("return F.max_pool1d(x, 4, 1, 2, 3)", (2, 3, 19), "float32", 1),
    "max1d-ceil": ("return F.max_pool1d(x, 3, 2, 1, ceil_mode=True)", (2, 3, 16), "float32", 1),
    "max2d-ceil-dilated": ("return F.max_pool2d(x, 3, 2, 1, dilation=2, ceil_mode=True)", (2, 3, 9, 11), "float32", 1),
    "max3d-mixed": ("return F.max_pool3d(x, (2, 3, 2), (2, 1, 2), (1, 1, 0), (1, 2, 1), ceil_mode=True)",
                    (1, 2, 5, 7, 6), "float32", 1),
    "max2d-bf16": ("return F.max_pool2d(x, 2)", (2, 3, 7, 9), "bfloat16", 1),
    # Windows clipped at the end (ceil_mode) counted without the padding, then with it, then a fixed divisor.
    "avg1d-ceil-exclude-pad": ("return F.avg_pool1d(x, 3, 2, 1, ceil_mode=True, count_include_pad=False)",
                               (2, 3, 16), "float32", 1),
    "avg2d-ceil-include-pad": ("return F.avg_pool2d(x, 3, 2, 1, ceil_mode=True)", (2, 3, 10, 9), "float32", 1),
    "avg2d-divisor": ("return F.avg_pool2d(x, (2, 3), (1, 2), (1, 1), divisor_override=5)", (2, 2, 6, 7),
                      "float32", 1),
    "avg3d-exclude-pad": ("return F.avg_pool3d(x, 3, 2, 1, ceil_mode=True, count_include_pad=False)",
                          (1, 2, 6, 5, 7), "float32", 1),
    "avg2d-fp16": ("return F.avg_pool2d(x, 3, 2, 1)", (2, 3, 9, 8), "float16", 1),
    # The pointwise work before a pool (recomputed for each window element) and after it: one kernel.
    "prologue-pool-epilogue": ("return torch.tanh(F.max_pool2d(torch.relu(x) * 2.0 - 1.0, 2) + 0.5)",
                               (2, 3, 8, 10), "float32", 1),
    # A pool of a pool: one kernel, the inner window inside the outer.
    "pool-of-pool": ("return F.avg_pool2d(F.max_pool2d(x, 2), 2, 1, 1)", (1, 3, 10, 10), "float32", 1),
    # The value before the pool is returned too: it is written once, and the pool reads it back.
    "shared-prologue": ("y = x * 3.0\n        return y, F.max_pool2d(y, 3, 2, 1)", (2, 3, 7, 7), "float32", 2),
    # Rows of more than 2048 outputs: the block stages its span of the input in shared memory (the padding
    # at both ends, a tile cut short at the row's end, the row's coordinates from the block).
    "max1d-staged-dilated": ("return F.max_pool1d(x, 8, 1, 4, 3)", (2, 3, 4200), "float32", 1),
    "avg1d-staged-stride2-clipped": ("return torch.tanh(F.avg_pool1d(torch.relu(x) * 2.0 - 1.0, 5, 2, 2, "
                                     "ceil_mode=True, count_include_pad=False) + 0.5)", (3, 8301), "float32", 1),
    "max1d-staged-bf16": ("return F.max_pool1d(x, 3, 1, 1) * 0.5", (1, 2, 5000), "bfloat16", 1),
    # A sum of the pooled values: the pool, then a reduction kernel reading its output.
    "pool-then-sum": ("return F.avg_pool1d(x, 2).sum(dim=-1)", (3, 4, 12), "float32", 2),
}


def _source(name: str) -> str:
    body, shape, dtype, _ = MODELS[name]
    return HEAD + f"""

class Model(nn.Module):
    def forward(self, x):
        {body}


def get_inputs():
    x = torch.randn{shape} * 3
    # A whole window of -inf somewhere, and single NaN / -inf values: padding must never win a max.
    x.view(-1)[:3] = float("-inf")
    x.view(-1)[7] = float("nan")
    x.view(-1)[-2] = float("-inf")
    return [x.to(torch.{dtype})]
"""


@pytest.mark.parametrize("name", sorted(MODELS))
def test_pooling_kernel_matches_eager_on_the_host(name, tmp_path, monkeypatch):
    from stitch_lsp.worker.trace_handler import trace_task

    source = _source(name)
    reply = trace_task(source)
    assert reply.ok, reply.message
    program = lower(reply.graph)
    assert program.covered and not program.library_calls, (program.blocking_ops, program.library_calls)
    assert len(program.kernels) == MODELS[name][3], [k.note for k in program.kernels]
    assert any(k.kind == "window" for k in program.kernels)
    monkeypatch.setattr(host, "_driver", rows._driver)  # warps and barriers, for the reduction after a pool
    host.check_against_eager(source, program, ("random", "nan", "inf"), tmp_path)


RARE_EDGES = HEAD + """

class Model(nn.Module):
    def forward(self, x):
        return F.max_pool1d(x, 3, 1, 1) * 0.5 + F.avg_pool1d(x, 5, 1, 2, count_include_pad=False)


def get_inputs():
    return [torch.randn(2, 3, 1024)]
"""


def test_interior_windows_skip_the_checks_where_few_warps_hold_an_edge_window(tmp_path, monkeypatch):
    from stitch_lsp.worker.trace_handler import trace_task

    # Rows of 1024 outputs, an edge window at each end: one warp in 16 holds one. Each pool tests its window's
    # ends once, then runs an unchecked loop or the checked one; both agree with eager, NaN and Inf included.
    program = lower(trace_task(RARE_EDGES).graph)
    body = next(k.source for k in program.kernels if k.kind == "window").split('extern "C"')[1]
    assert len(re.findall(r"if \(s\d+ >= 0 && s\d+ \+ \d < 1024\) \{", body)) == 2, body
    assert len(re.findall(r"if \(h\d+ >= 0 && h\d+ < 1024\)", body)) == 2, body  # the checked loops
    monkeypatch.setattr(host, "_driver", rows._driver)
    host.check_against_eager(RARE_EDGES, program, ("random", "nan", "inf"), tmp_path)
    # Small rows of stride-2 windows: a quarter of the warps would run both loops, so only the checked one runs.
    common = lower(trace_task(_source("avg2d-ceil-include-pad")).graph)
    body = next(k.source for k in common.kernels if k.kind == "window").split('extern "C"')[1]
    assert not re.findall(r"if \(s\d+ >= 0", body) and re.findall(r"if \(h\d+ >= 0", body), body


def test_long_rows_stage_their_span_in_shared_memory_short_rows_take_a_thread_an_output():
    from stitch_lsp.worker.trace_handler import trace_task

    def window_source(name):
        program = lower(trace_task(_source(name)).graph)
        return next(k for k in program.kernels if k.kind == "window")

    staged = window_source("max1d-staged-dilated")
    assert "__shared__ float stg_span[" in staged.source and "__syncthreads();" in staged.source
    assert staged.grid == 2 * 3 * 3 and staged.block == 256  # 4189 outputs a row: three tiles of 2048
    # Coordinates once a block: no division by the row's length in a thread's outputs.
    assert not re.findall(r"/ 4189\b|% 4189\b", staged.source)
    short = window_source("max1d-dilated")
    assert "stg_span" not in short.source


INDICES = HEAD + """

class Model(nn.Module):
    def forward(self, x):
        values, where = F.max_pool2d(x, 2, return_indices=True)
        return values * 2.0, where


def get_inputs():
    return [torch.randn(2, 3, 8, 8)]
"""


def test_plan_says_pooling_runs_in_a_generated_kernel():
    from stitch_lsp.worker.trace_handler import trace_task

    source = _source("prologue-pool-epilogue")
    graph = trace_task(source).graph
    plan = make_plan(Task(name="pool", source=source), graph)
    kinds = [g.kind for g in plan.groups if g.kind != "view"]
    assert kinds == ["window"], describe(plan)
    text = describe(plan)
    assert "max_pool2d" in text and "PyTorch's pooling kernel" not in text, text
    assert "1 fused kernel(s) + 0 library call(s)" in " ".join(plan.notes)


def test_a_max_pool_whose_indices_are_read_stays_a_library_call_and_the_plan_says_why():
    from stitch_lsp.worker.trace_handler import trace_task

    graph = trace_task(INDICES).graph
    plan = make_plan(Task(name="pool", source=INDICES), graph)
    pool = next(g for g in plan.groups if g.kind == "pool")
    assert "indices are read" in pool.note
    program = lower(graph)
    assert any("max_pool2d_with_indices" in label for label in program.library_calls)
    assert not program.blocking_ops
