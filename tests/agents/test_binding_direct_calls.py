"""The fused module calls its leftover PyTorch ops through torch's own bindings: the same results.

The generated binding runs GEMMs left to cuBLAS, views and convolutions through a table of torch
functions (faster to call than ``torch.ops``); each must compute exactly what its ATen overload does.
"""

from __future__ import annotations

import types

import pytest

torch = pytest.importorskip("torch")

from stitch_lsp.coders.template import candidate_module, lower  # noqa: E402
from stitch_lsp.plan.gemm_tiles import GemmOptions  # noqa: E402
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
        "aten.reshape.default": ([r(2, 3, 4).transpose(1, 2), [8, 3]], {}),
        "aten.cat.default": ([[a, r(2, 7)], 0], {}),
        "aten.unsqueeze.default": ([c, 1], {}),
        "aten.convolution.default": ([r(1, 2, 6, 6), r(4, 2, 3, 3), r(4), [1, 2], [1, 0], [1, 1], False, [0, 0], 1],
                                     {}),
        "aten.linear.default": ([a, r(3, 7), c], {}),
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


def test_a_linear_layer_left_to_cublas_is_one_linear_call_and_matches_eager():
    module, program = _module("return F.gelu(self.lin(x))", m=6, k=5, n=4)
    data = dict(module._BAKED)
    ops = [s for s in data["steps"] if "op" in s]
    # Traced as permute + addmm; run as the one linear call eager makes (the same addmm underneath).
    assert [s["op"] for s in ops] == ["aten.linear.default"]
    x, w, b = (a["$"] for a in ops[0]["args"])
    roles = {i.name: i.path or "x" for i in program.graph.inputs}
    assert (roles[x], roles[w], roles[b]) == ("x", "lin.weight", "lin.bias")
    data["steps"], data["outputs"] = ops, [ops[-1]["name"]]
    prepared = module._Prepared(data)
    assert [step[2] for step in prepared.steps] == [torch.nn.functional.linear]
    torch.manual_seed(0)
    model = module.ModelNew()
    x = torch.randn(6, 5)
    params = dict(model.named_parameters())
    tensors = [params[i.path].detach() if i.role == "param" else x for i in program.graph.inputs]
    with torch.no_grad():
        assert torch.equal(prepared(tensors), model.lin(x))


def test_a_transposed_weight_read_by_another_step_keeps_its_own_step():
    from stitch_lsp.coders.template.program import _linear_calls

    permute = {"op": "aten.permute.default", "name": "wt", "args": [{"$": "w"}, [1, 0]], "kwargs": {}}
    addmm = {"op": "aten.addmm.default", "name": "y", "args": [{"$": "b"}, {"$": "x"}, {"$": "wt"}], "kwargs": {}}
    kernel = {"kernel": "stitch_fused_0", "grid": 1, "block": 256, "args": ["wt"], "outputs": [["z", [5, 4], "float32"]]}
    folded = _linear_calls([permute, addmm], set())
    assert folded == [{"op": "aten.linear.default", "name": "y", "args": [{"$": "x"}, {"$": "w"}, {"$": "b"}],
                       "kwargs": {}}]
    assert _linear_calls([permute, addmm, kernel], set()) == [permute, addmm, kernel]  # a kernel reads wt too
    assert _linear_calls([permute, addmm], {"wt"}) == [permute, addmm]  # wt is returned
    scaled = dict(addmm, kwargs={"beta": 0.5})
    assert _linear_calls([permute, scaled], set()) == [permute, scaled]  # linear takes no beta


def test_call_arguments_are_resolved_once_and_filled_per_call():
    module, _ = _module("return F.gelu(self.lin(x))")
    env = {"a": torch.ones(1), "b": torch.zeros(1)}
    fill = module._resolver([{"$": "a"}, [1, 0], {"$": "b"}, {"$dtype": "float16"}])
    first, second = fill(env, None), fill(env, None)
    assert first[0] is env["a"] and first[2] is env["b"] and first[1] == [1, 0] and first[3] is torch.float16
    assert first is not second  # a fresh list each call: a step may change its own
    fixed = module._resolver({"dim": 1, "dtype": {"$dtype": "float32"}})
    assert fixed(env, None) == {"dim": 1, "dtype": torch.float32}
    nested = module._resolver([[{"$": "a"}, {"$": "b"}], 0])
    assert nested(env, None)[0][1] is env["b"]
    assert module._resolver([{"$device": True}])(env, "cuda:3") == ["cuda:3"]


def test_an_op_outside_the_table_still_runs_through_torch_ops():
    module, _ = _module("return F.gelu(self.lin(x))")
    assert module._aten("aten.sub.Tensor") is torch.ops.aten.sub.Tensor
