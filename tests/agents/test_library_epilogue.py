"""A GEMM's ReLU / tanh-GELU goes into cuBLASLt's epilogue; anything it would approximate does not."""

from __future__ import annotations

import pytest

from stitch_lsp.coders.template import TemplateCoder, lower
from stitch_lsp.coders.template.library_epilogue import FUSED
from stitch_lsp.plan.planner import make_plan
from stitch_lsp.pipeline import Task

torch = pytest.importorskip("torch")
trace_handler = pytest.importorskip("stitch_lsp.worker.trace_handler")

HEADER = """
import torch
import torch.nn as nn
import torch.nn.functional as F

class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(48, 40)

    def forward(self, x):
        {body}

def get_inputs():
    return [torch.randn(24, 48)]

def get_init_inputs():
    return []
"""


def _graph(body: str):
    source = HEADER.replace("{body}", body)
    reply = trace_handler.trace_task(source)
    assert reply.ok, reply.message
    return Task(name="t", source=source), reply.graph


def _run_on_cpu(graph, model, x):
    """Evaluate the (all-PyTorch) lowered graph with torch.ops, as the binding does on a GPU."""
    env = {}
    params = dict(model.named_parameters())
    for i in graph.inputs:
        env[i.name] = params[i.path] if i.role == "param" else x
    for node in graph.nodes:
        fn = torch.ops
        for part in node.op.split("."):
            fn = getattr(fn, part)

        def value(v):
            if isinstance(v, dict) and "$" in v:
                return env[v["$"]]
            if isinstance(v, list):
                return [value(e) for e in v]
            return v

        env[node.name] = fn(*value(node.args), **node.kwargs)
    return env[graph.outputs[0]]


@pytest.mark.parametrize("body, use_gelu", [
    ("return torch.relu(self.linear(x))", False),
    ("return F.relu(self.linear(x))", False),
    ('return F.gelu(self.linear(x), approximate="tanh")', True),
])
def test_relu_and_tanh_gelu_fold_into_the_gemm(body, use_gelu):
    task, graph = _graph(body)
    program = lower(graph)
    ops = [n.op for n in program.graph.nodes]
    assert FUSED in ops and "aten.addmm.default" not in ops
    fused = next(n for n in program.graph.nodes if n.op == FUSED)
    assert fused.kwargs == {"use_gelu": use_gelu}
    assert program.kernels == []  # nothing left for a kernel: the store is the epilogue's
    candidate = TemplateCoder().generate(task, make_plan(task, graph))
    assert candidate.fuses_anything and candidate.library_fusions
    assert candidate.fused_what() == "a cuBLASLt epilogue"

    if use_gelu:
        return  # on CPU torch._addmm_activation's GELU is the erf form (on CUDA, tanh on every path)
    # Same numbers as the reference (on CPU torch computes addmm, then the activation).
    torch.manual_seed(0)
    ns: dict = {}
    exec(task.source, ns)
    model = ns["Model"]()
    x = torch.randn(24, 48)
    with torch.no_grad():
        torch.testing.assert_close(_run_on_cpu(program.graph, model, x), model(x), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("body", [
    "return F.gelu(self.linear(x))",  # erf GELU: cuBLASLt would give the tanh form
    "return torch.sigmoid(self.linear(x))",  # no such epilogue
    "y = self.linear(x)\n        return torch.relu(y) + y",  # the GEMM's output is read twice
    "return torch.relu(self.linear(x) * 2.0)",  # something between the GEMM and the activation
])
def test_other_epilogues_stay_in_a_fused_kernel(body):
    task, graph = _graph(body)
    program = lower(graph)
    ops = [n.op for n in program.graph.nodes]
    assert FUSED not in ops and "aten.addmm.default" in ops
    assert program.library_fusions == []
    assert len(program.kernels) == 1
