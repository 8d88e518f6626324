"""Generated programs never ``view`` a tensor whose strides they have not checked.

Eager's ``y.transpose(1, 2).contiguous().view(B, T, C)`` works because ``contiguous()`` made a row-major
copy. Traced, that ``contiguous()`` is a clone whose memory format must survive into the program: a clone
that preserved the transposed strides made every level-3 attention task fail with "view size is not
compatible with input tensor's size and stride". And where the program's own value has other strides than
eager's had (a kernel writes its output row-major where eager kept a transposed layout), a ``view`` of it
becomes a ``reshape``: the same view where the strides allow one, a copy where they do not.
"""

from __future__ import annotations

import types

import pytest

torch = pytest.importorskip("torch")
trace_handler = pytest.importorskip("stitch_lsp.worker.trace_handler")

from stitch_lsp.coders import ATTENTION_LIBRARY  # noqa: E402
from stitch_lsp.coders.template import candidate_module, lower  # noqa: E402
from stitch_lsp.plan.gemm_tiles import GemmOptions  # noqa: E402
from stitch_lsp.coders.template.program import program_data  # noqa: E402
from stitch_lsp.coders.template.strides import checked_views  # noqa: E402
from stitch_lsp.pipeline import Task  # noqa: E402
from tests.agents.library_program_host import run_library_program  # noqa: E402

HEADS_BACK = '''
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(16, 16)

    def forward(self, x):
        B, H, T, D = x.shape
        y = torch.matmul(x, self.lin.weight[:D, :D])          # (B, H, T, D), a batched GEMM
        y = y.transpose(1, 2).contiguous().view(B, T, H * D)  # heads back: needs the contiguous copy
        return self.lin(y)

def get_inputs():
    return [torch.randn(2, 4, 6, 4)]

def get_init_inputs():
    return []
'''


def run_on_cpu(source):
    reply = trace_handler.trace_task(source)
    assert reply.ok, reply.message
    return run_library_program(source, reply.graph)


def test_contiguous_then_view_is_a_copy_kernel_whose_output_is_viewed():
    # The copy is a kernel of ours (its output row-major), so the view after it stays a view; the program is
    # run against eager on the host in tests/agents/test_window_views_host.py ("heads-back").
    reply = trace_handler.trace_task(HEADS_BACK)
    assert reply.ok, reply.message
    program = lower(reply.graph, GemmOptions(mode="cublas"))
    index = reply.graph.index()
    copied = {n for step in program.steps if step.kernel is not None for n in step.nodes
              if index[n].op == "aten.clone.default"}
    assert copied and all(index[n].kwargs.get("memory_format") == {"$memory_format": "contiguous_format"}
                          for n in copied)
    steps = checked_views(program_data(program)["steps"])
    kernel_outputs = {o[0] for s in steps if "kernel" in s for o in s["outputs"]}
    assert not [s for s in steps if s.get("op") == "aten.clone.default"]  # no copy left to PyTorch
    (proj,) = [s for s in steps if s.get("op") == "aten.linear.default"]
    assert proj["args"][0]["$"] in kernel_outputs  # the projection reads the kernel's row-major output


def kernel(name, out):
    return {"kernel": name, "grid": 1, "block": 32, "args": ["x"], "outputs": [[out, [4, 6], "float32"]]}


def op(op, name, src, *rest, **kwargs):
    return {"op": op, "name": name, "args": [{"$": src}, *rest], "kwargs": kwargs}


def test_views_of_values_not_known_contiguous_become_reshapes():
    steps = [
        kernel("k0", "a"),
        op("aten.view.default", "a2", "a", [24]),  # a kernel's output: row-major, a view is safe
        op("aten.permute.default", "p", "a", [1, 0]),
        op("aten.view.default", "p2", "p", [24]),  # strides unknown: reshape
        op("aten.clone.default", "c", "p", memory_format={"$memory_format": "contiguous_format"}),
        op("aten.view.default", "c2", "c", [24]),  # a contiguous copy: view
        op("aten.clone.default", "k", "p"),  # preserves the permuted strides
        op("aten.view.default", "k2", "k", [24]),
        op("aten.view.default", "x2", "x", [24]),  # forward's input: the caller's strides
        op("aten.linear.default", "l", "x2", "w"),
        op("aten.view.default", "l2", "l", [24]),  # cuBLAS's result is row-major
    ]
    ops = {s["name"]: s["op"] for s in checked_views(steps) if "op" in s}
    assert ops["a2"] == ops["c2"] == ops["l2"] == "aten.view.default"
    assert ops["p2"] == ops["k2"] == ops["x2"] == "aten.reshape.default"


def test_no_generated_view_reads_a_value_of_unchecked_strides():
    reply = trace_handler.trace_task(HEADS_BACK)
    data = program_data(lower(reply.graph, GemmOptions(mode="cublas")))
    made = {}
    for step in data["steps"]:
        if "op" in step:
            made[step["name"]] = step
    for step in data["steps"]:
        if step.get("op") == "aten.view.default":
            src = made.get(step["args"][0]["$"])
            assert src is not None and src["op"] in ("aten.clone.default", "aten.linear.default", "aten.addmm.default",
                                                     "aten.bmm.default", "aten.mm.default", "aten.view.default",
                                                     "aten.reshape.default"), step


def test_reshape_is_a_direct_call_with_eagers_result():
    reply = trace_handler.trace_task(HEADS_BACK)
    module = types.ModuleType("candidate")
    exec(compile(candidate_module(Task(name="t", source=HEADS_BACK), lower(reply.graph, GemmOptions(mode="cublas"))),
                 "candidate", "exec"), module.__dict__)
    x = torch.randn(2, 3, 4).transpose(1, 2)
    got = module._DIRECT["aten.reshape.default"](x, [2, 12])
    assert torch.equal(got, torch.ops.aten.reshape.default(x, [2, 12]))


SPLIT_HEADS_IN = '''
import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, q, k):
        return torch.softmax((q @ k.transpose(-2, -1)) * 0.25, dim=-1)

def get_inputs():
    return [torch.randn(2 * 6 * 3 * 4).as_strided((2, 3, 6, 4), (72, 4, 12, 1)),
            torch.randn(2 * 6 * 3 * 4).as_strided((2, 3, 6, 4), (72, 4, 12, 1))]

def get_init_inputs():
    return []
'''


def test_a_copy_of_forwards_strided_inputs_stays_one_pytorch_copy():
    # A kernel reads its inputs row-major: the binding would copy the caller's strided q, then the kernel copy it
    # again. PyTorch's clone, reading the strides as they are, is the one copy.
    reply = trace_handler.trace_task(SPLIT_HEADS_IN)
    assert reply.ok, reply.message
    # As the attention kernel's fallback lowers it: the scores GEMM and a softmax kernel.
    program = lower(reply.graph, GemmOptions(mode="cublas"), attention=ATTENTION_LIBRARY)
    index = reply.graph.index()
    in_kernels = {n for step in program.steps if step.kernel is not None for n in step.nodes}
    clones = [n.name for n in reply.graph.nodes if n.op == "aten.clone.default"]
    assert clones and not set(clones) & in_kernels
    assert [index[n].op for n in in_kernels if index[n].op == "aten.softmax.default" or "exp" in index[n].op]
