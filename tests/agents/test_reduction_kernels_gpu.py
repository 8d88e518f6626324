"""On a GPU: the row and column reduction kernels of test_template_rows_host.py, built by NVRTC and run.

The host test checks the kernels' logic with exact math; this one runs the same cases (forced launch
shapes included) on the device, with the approximate units the kernels really use, against eager on
the same device, on random and adversarial inputs, and checks the one-pass variance under a large
offset against float64.

    python -m pytest -q -m gpu tests/agents/test_reduction_kernels_gpu.py
"""

from __future__ import annotations

import types

import pytest

from stitch_lsp.plan.planner import make_plan
from stitch_lsp.coders.template import TemplateCoder, reduction_kernels as kernels
from stitch_lsp.pipeline import Task
from tests.agents.gpu_models import assert_matches_eager
from tests.agents.test_template_rows_host import CASES, OFFSET_CASES, REPO

pytestmark = [pytest.mark.gpu, pytest.mark.timeout(900)]


def _models(name: str, sizes: dict, config, monkeypatch):
    torch = pytest.importorskip("torch")
    from stitch_lsp.worker.trace_handler import trace_task

    source = (REPO / "bench" / "tasks" / f"{name}.py").read_text()
    source += "\n" + "\n".join(f"{k} = {v}" for k, v in sizes.items()) + "\n"
    reply = trace_task(source)
    assert reply.ok, reply.message
    if config is not None:
        monkeypatch.setattr(kernels, "row_config", lambda *a: config)
        monkeypatch.setattr(kernels, "cluster_for", lambda *a, **k: None)  # the forced shape, not a cluster
    task = Task(name=name, source=source)
    candidate = TemplateCoder().generate(task, make_plan(task, reply.graph))
    ref_mod = types.ModuleType(f"ref_{name}")
    exec(compile(source, "reference", "exec"), ref_mod.__dict__)
    cand_mod = types.ModuleType(f"cand_{name}")
    exec(compile(candidate.module_source, "candidate", "exec"), cand_mod.__dict__)
    with torch.device("cuda"):
        torch.manual_seed(0)
        ref = ref_mod.Model(*ref_mod.get_init_inputs())
        torch.manual_seed(0)
        cand = cand_mod.ModelNew(*ref_mod.get_init_inputs())
    return ref_mod, ref.cuda(), cand.cuda()


@pytest.mark.parametrize("case", sorted(CASES))
def test_reduction_kernel_matches_eager_on_the_gpu(case, monkeypatch):
    name, sizes, config = CASES[case]
    assert_matches_eager(*_models(name, sizes, config, monkeypatch))


@pytest.mark.parametrize("case", sorted(OFFSET_CASES))
def test_one_pass_variance_is_as_accurate_as_eager_on_the_gpu(case, monkeypatch):
    import torch

    name, sizes, config = OFFSET_CASES[case]
    ref_mod, ref, cand = _models(name, sizes, config, monkeypatch)
    torch.manual_seed(1)
    values = [v.cuda() + 1000.0 for v in ref_mod.get_inputs()]
    with torch.no_grad():
        eager = ref(*[v.clone() for v in values])
        ours = cand(*[v.clone() for v in values])
        exact = ref.double()(*[v.double() for v in values])
    ours_err = float((ours.double() - exact).abs().max())
    eager_err = float((eager.double() - exact).abs().max())
    # CUDA's eager kernels use Welford too: allow ours a little slack against theirs.
    assert ours_err <= 1.5 * eager_err + 1e-6, (ours_err, eager_err)


LONG_ROWS = {
    # rows too long for a cluster's registers (48 values a thread of 8 blocks of 1024): held in shared memory
    "softmax": "torch.softmax(x, dim=1)",
    "log-softmax-scaled": "torch.log_softmax(x * 0.5, dim=-1)",
    "layernorm-free": "(x - x.mean(-1, keepdim=True)) / torch.sqrt(x.var(-1, keepdim=True, unbiased=False) + 1e-5)",
}


def _rows_candidate(case: str, expr: str, rows: int, row_len: int, inputs: int = 1):
    """A model of ``expr`` over ``inputs`` tensors of rows x row_len, its reference and the template Coder's
    candidate, with the candidate's notes."""
    from stitch_lsp.worker.trace_handler import trace_task
    from tests.agents.gpu_models import reference_and_candidate

    names = ["x", "y"][:inputs]
    source = f"""
import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, {", ".join(names)}):
        return {expr}

def get_inputs():
    return [torch.randn({rows}, {row_len}) * 3 for _ in range({inputs})]

def get_init_inputs():
    return []
"""
    reply = trace_task(source)
    assert reply.ok, reply.message
    task = Task(name=case, source=source)
    candidate = TemplateCoder().generate(task, make_plan(task, reply.graph))
    return candidate.notes, reference_and_candidate(case, source, candidate.module_source)


@pytest.mark.parametrize("case", sorted(LONG_ROWS))
def test_rows_held_in_a_clusters_shared_memory_match_eager_on_the_gpu(case):
    notes, models = _rows_candidate(case, LONG_ROWS[case], 40, 393216)
    assert any("holding it in shared memory" in n for n in notes), notes
    assert_matches_eager(*models)


TEAM_ROWS = {
    # rows a team of blocks takes, each block staging its part of the next row in shared memory: odd lengths
    # (parts that start between 16-byte words), two passes, a position, two staged inputs
    "l2-norm-odd": ("x / torch.norm(x, p=2, dim=1, keepdim=True)", 65535, 1),
    "standardise": ("(x - x.mean(-1, keepdim=True)) / torch.sqrt(x.var(-1, keepdim=True, unbiased=False) + 1e-5)",
                    65536, 1),
    "softmax-odd": ("torch.softmax(x, dim=1)", 43733, 1),
    "argmax": ("torch.argmax(x, dim=1)", 59401, 1),
    "sum-of-two": ("(x + y) / (x + y).abs().sum(dim=1, keepdim=True)", 40000, 2),
}


@pytest.mark.parametrize("case", sorted(TEAM_ROWS))
def test_rows_taken_by_a_team_match_eager_on_the_gpu(case, monkeypatch):
    monkeypatch.setattr(kernels, "TEAM_MIN_ROWS", 1)  # 300 rows: every team takes one to three
    expr, row_len, inputs = TEAM_ROWS[case]
    notes, models = _rows_candidate(case, expr, 300, row_len, inputs)
    assert any("a team of" in n for n in notes), notes
    assert_matches_eager(*models)


LAGGED_ROWS = {
    # rows too long for a cluster's or a team's shared memory, streamed as tiles by every SM with their outputs
    # written from a ring of tiles a few steps after their statistics: a variance, odd lengths (rows that start
    # between 16-byte words, vec 1 and 2), a maximum, two staged inputs
    "standardise": ("(x - x.mean(-1, keepdim=True)) / torch.sqrt(x.var(-1, keepdim=True, unbiased=False) + 1e-5)",
                    40, 2097152, 1),
    "l2-norm-odd": ("x / torch.norm(x, p=2, dim=1, keepdim=True)", 24, 2097151, 1),
    "max-shift-odd": ("x - x.amax(dim=1, keepdim=True)", 20, 3000002, 1),
    "sum-of-two": ("(x + y) / (x + y).abs().sum(dim=1, keepdim=True)", 20, 600000, 2),
}


@pytest.mark.parametrize("case", sorted(LAGGED_ROWS))
def test_rows_taken_by_a_lagged_kernel_match_eager_on_the_gpu(case):
    expr, rows, row_len, inputs = LAGGED_ROWS[case]
    notes, models = _rows_candidate(case, expr, rows, row_len, inputs)
    assert any("one read of each element" in n for n in notes), notes
    assert_matches_eager(*models)
