"""The fused module calls its leftover PyTorch ops through torch's own bindings: the same results.

The generated binding runs GEMMs left to cuBLAS, views and convolutions through a table of torch
functions (faster to call than ``torch.ops``); each must compute exactly what its ATen overload does.
"""

from __future__ import annotations

import types

import pytest

torch = pytest.importorskip("torch")

from stitch_lsp.agents.template_coder import candidate_module, lower  # noqa: E402
from stitch_lsp.agents.template_coder.gemm_tiles import GemmOptions  # noqa: E402
from tests.agents.gemm_interpret_cases import task  # noqa: E402


def _module(body: str, **kw):
    t, graph = task(body, **kw)
    program = lower(graph, GemmOptions(mode="cublas"))
    module = types.ModuleType("candidate")
    exec(compile(candidate_module(t, program), "candidate", "exec"), module.__dict__)
    return module, program


def _samples():
    g = torch.Generator().manual_seed(0)

    def r(*shape):
        return torch.randn(*shape, generator=g)

    a, b, c = r(5, 7), r(7, 3), r(3)
    return {
        "aten.addmm.default": ([c, a, b], {"beta": 0.5, "alpha": 2.0}),
        "aten.mm.default": ([a, b], {}),
        "aten.bmm.default": ([r(2, 5, 7), r(2, 7, 3)], {}),
        "aten.baddbmm.default": ([r(2, 5, 3), r(2, 5, 7), r(2, 7, 3)], {"beta": 0.25, "alpha": 3.0}),
        "aten.permute.default": ([r(2, 3, 4), [2, 0, 1]], {}),
        "aten.t.default": ([a], {}),
        "aten.transpose.int": ([r(2, 3, 4), 0, 2], {}),
        "aten.view.default": ([r(2, 3, 4), [6, 4]], {}),
        "aten.cat.default": ([[a, r(2, 7)], 0], {}),
        "aten.unsqueeze.default": ([c, 1], {}),
        "aten.convolution.default": ([r(1, 2, 6, 6), r(4, 2, 3, 3), r(4), [1, 2], [1, 0], [1, 1], False, [0, 0], 1],
                                     {}),
    }


def test_every_direct_call_computes_what_its_aten_overload_does():
    module, _ = _module("return F.gelu(self.lin(x))")
    samples = _samples()
    assert set(module._DIRECT) == set(samples), "each direct call needs sample arguments here"
    for op, (args, kwargs) in samples.items():
        overload = torch.ops
        for part in op.split("."):
            overload = getattr(overload, part)
        got, want = module._DIRECT[op](*args, **kwargs), overload(*args, **kwargs)
        assert got.shape == want.shape and got.dtype == want.dtype, op
        assert torch.equal(got, want), op
        assert got.stride() == want.stride(), op


def test_a_gemm_left_to_cublas_runs_through_the_direct_calls_and_matches_eager():
    module, program = _module("return F.gelu(self.lin(x))", m=6, k=5, n=4)
    data = dict(module._BAKED)
    ops = [s for s in data["steps"] if "op" in s]
    assert [s["op"] for s in ops] == ["aten.permute.default", "aten.addmm.default"]
    # The GEMM and its view only (the GELU is a CUDA kernel): their output is the linear layer's.
    data["steps"], data["outputs"] = ops, [ops[-1]["name"]]
    prepared = module._Prepared(data)
    assert [step[2] for step in prepared.steps] == [torch.permute, torch.addmm]
    torch.manual_seed(0)
    model = module.ModelNew()
    x = torch.randn(6, 5)
    params = dict(model.named_parameters())
    tensors = [params[i.path].detach() if i.role == "param" else x for i in program.graph.inputs]
    with torch.no_grad():
        assert torch.equal(prepared(tensors), model.lin(x))


def test_an_op_outside_the_table_still_runs_through_torch_ops():
    module, _ = _module("return F.gelu(self.lin(x))")
    assert module._aten("aten.sub.Tensor") is torch.ops.aten.sub.Tensor
