"""A fused candidate built with other constructor arguments than its graph was traced with.

Constructor arguments can set the graph's constants (a pool's size, a scale), which re-lowering the traced
graph for new shapes cannot change: the module traces the reference again for them, or refuses clearly.
Nothing runs a kernel here (the values are checked by Triton's interpreter in test_gemm_family.py).
"""

from __future__ import annotations

import types

import pytest

from gemm_interpret_cases import CONSTRUCTOR_TASK  # noqa: E402 - the task, shared with the interpreter run

torch = pytest.importorskip("torch")
trace_handler = pytest.importorskip("stitch_lsp.worker.trace_handler")

TRACED = (40, 96, 4, 2.0)


@pytest.fixture(scope="module")
def generated():
    from stitch_lsp.coders.template import candidate_module, lower
    from stitch_lsp.plan.gemm_tiles import GemmOptions
    from stitch_lsp.pipeline import Task
    from stitch_lsp.verify.anti_hacking import static_flags

    reply = trace_handler.trace_task(CONSTRUCTOR_TASK)
    assert reply.ok, reply.message
    program = lower(reply.graph, GemmOptions(mode="cublas"))  # cuBLAS, then one kernel: * scale and the pool
    source = candidate_module(Task(name="ctor", source=CONSTRUCTOR_TASK), program)
    assert static_flags(source, list(program.uncovered_ops)) == []
    module = types.ModuleType("candidate")
    exec(compile(source, "candidate", "exec"), module.__dict__)
    return module


def _tensors(module, model, batch: int, features: int) -> list:
    """The fused call's arguments: the model's parameters, then forward's input."""
    params = dict(model.named_parameters())
    x = torch.randn(batch, features)
    return [params[path] if role == "param" else x for role, path, _ in module._BAKED["roles"]]


def _program(module, model, batch: int, features: int) -> dict:
    """What the model's forward would run for an input of [batch, features]."""
    with torch.no_grad():  # as the Verifier calls forward
        return model._stitch_fused.data_for(_tensors(module, model, batch, features))


def test_the_traced_arguments_keep_the_generated_program(generated):
    for model in (generated.ModelNew(*TRACED), generated.ModelNew(40, 96, pool=4, scale=2.0),
                  generated.ModelNew(40, 96, 4, 2.0, True)):
        assert model._stitch_fused is generated._FUSED
        assert _program(generated, model, 24, 40) is generated._BAKED


def test_other_arguments_give_a_program_with_their_constants(generated):
    model = generated.ModelNew(41, 99, 5, 3.0)
    data = _program(generated, model, 25, 41)
    (kernel,) = [s for s in data["steps"] if "kernel" in s]  # the scale and the pool after cuBLAS's GEMM
    source = data["sources"][kernel["kernel"]]
    assert "3.0f" in source and "2.0f" not in source  # the scale, not the traced 2.0
    assert "< 5; ++" in source and "(float)(5)" in source  # the pool's size, not the traced 4
    assert [o[1] for o in kernel["outputs"]] == [[25, 19]]  # 99 features pooled by 5
    # Re-lowering the traced graph for these shapes (what the module did before) keeps the traced pool:
    old = generated._FUSED.data_for(_tensors(generated, model, 25, 41))
    (old_kernel,) = [s for s in old["steps"] if "kernel" in s]
    assert "< 4; ++" in old["sources"][old_kernel["kernel"]]


def test_arguments_that_change_the_parameters_are_refused_with_the_reason(generated):
    model = generated.ModelNew(40, 96, 4, 2.0, bias=False)  # no bias: the fused call passes one
    with pytest.raises(ValueError, match=r"other parameters.*\(lin\.weight, input 0\).*fuse again"):
        model(torch.randn(24, 40))  # what the Verifier's second shape takes as the candidate refusing it


def test_construction_draws_the_same_weights_as_the_reference(generated):
    for args in (TRACED, (41, 99, 5, 3.0)):
        torch.manual_seed(3)
        want = generated._reference.Model(*args).state_dict()
        torch.manual_seed(3)
        got = generated.ModelNew(*args).state_dict()
        assert want.keys() == got.keys() and all(torch.equal(want[k], got[k]) for k in want)


def test_a_program_traced_again_is_fixed_for_its_first_shape_then_symbolic_for_the_rest(generated, monkeypatch):
    from stitch_lsp.coders.template import program

    traces = []
    real = program.program_for_init
    monkeypatch.setattr(program, "program_for_init",
                        lambda *a, **k: traces.append(k["symbolic"]) or real(*a, **k))
    model = generated.ModelNew(41, 99, 5, 3.0)
    _program(generated, model, 25, 41)
    assert model._stitch_fused.graph == "{}"  # fixed sizes: the fast trace, for the first call's shapes
    second = _program(generated, model, 27, 41)
    (kernel,) = [s for s in second["steps"] if "kernel" in s]
    assert [o[1] for o in kernel["outputs"]] == [[27, 19]]
    assert "3.0f" in second["sources"][kernel["kernel"]]  # the constructor's scale still, not the traced 2.0
    third = _program(generated, model, 30, 41)  # re-lowered from the symbolic graph: no third trace
    assert [o[1] for s in third["steps"] if "kernel" in s for o in s["outputs"]] == [[30, 19]]
    assert traces == [False, True]
