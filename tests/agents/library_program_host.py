"""A generated program whose GEMMs stay cuBLAS calls and whose attention stays PyTorch's fused call (PyTorch
calls only, no kernel of ours) run against eager on the CPU: the binding's own interpreter of the program,
fed the reference's parameters, buffers and inputs."""

from __future__ import annotations

import types

import torch

from stitch_lsp.coders.template import candidate_module, lower
from stitch_lsp.coders import ATTENTION_LIBRARY as LIBRARY
from stitch_lsp.pipeline import Task
from stitch_lsp.plan.gemm_tiles import GemmOptions


def run_library_program(source: str, graph, name: str = "t"):
    """(the lowered program, eager's output, the program's output) for a traced ``source``."""
    program = lower(graph, GemmOptions(mode="cublas"), attention=LIBRARY)
    assert program.kernels == [], [k.name for k in program.kernels]
    module = types.ModuleType("candidate")
    exec(compile(candidate_module(Task(name=name, source=source), program), "candidate", "exec"), module.__dict__)
    ref = types.ModuleType("reference")
    exec(compile(source, "reference", "exec"), ref.__dict__)
    torch.manual_seed(0)
    model = ref.Model(*ref.get_init_inputs()).eval()
    inputs = ref.get_inputs()
    state = {**dict(model.named_parameters()), **dict(model.named_buffers())}
    tensors = [state[i.path].detach() if i.role in ("param", "buffer") else inputs[i.index] for i in graph.inputs]
    with torch.no_grad():
        return program, model(*inputs), module._Prepared(module._BAKED)(tensors)
