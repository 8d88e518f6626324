"""On a GPU: the pooling kernels of test_template_pooling_host.py, built by NVRTC and run against eager on the
same device, on random and adversarial inputs (NaN and ±Inf planted: a max propagates NaN, padding never wins).
The long-row models run the kernel that stages its input span in shared memory.

    python -m pytest -q -m gpu tests/agents/test_pooling_kernels_gpu.py
"""

from __future__ import annotations

import types

import pytest

from stitch_lsp.agents.planner import make_plan
from stitch_lsp.agents.template_coder import TemplateCoder
from stitch_lsp.pipeline import Task
from tests.agents.test_template_pooling_host import MODELS, _source

pytestmark = [pytest.mark.gpu, pytest.mark.timeout(600)]


@pytest.mark.parametrize("name", sorted(MODELS))
def test_pooling_kernel_matches_eager_on_the_gpu(name):
    torch = pytest.importorskip("torch")
    from stitch_lsp.worker import inputs as inp
    from stitch_lsp.worker.compare import compare
    from stitch_lsp.worker.trace_handler import trace_task

    source = _source(name)
    reply = trace_task(source)
    assert reply.ok, reply.message
    task = Task(name=name, source=source)
    candidate = TemplateCoder().generate(task, make_plan(task, reply.graph))
    staged = "stg_span" in candidate.module_source
    assert staged == ("staged" in name), "long rows, and only they, stage their span"
    ref_mod = types.ModuleType(f"ref_{name}")
    exec(compile(source, "reference", "exec"), ref_mod.__dict__)
    cand_mod = types.ModuleType(f"cand_{name}")
    exec(compile(candidate.module_source, "candidate", "exec"), cand_mod.__dict__)
    ref, cand = ref_mod.Model().cuda(), cand_mod.ModelNew().cuda()
    for adversarial in ("random", "nan", "inf", "large"):
        torch.manual_seed(1)
        values = [v.cuda() for v in ref_mod.get_inputs()]
        if adversarial != "random":
            values = inp.adversarial(values, adversarial, 3)
        with torch.no_grad():
            result = compare(ref(*[v.clone() for v in values]), cand(*[v.clone() for v in values]))
        assert result.passed, f"{adversarial}: {result.detail}"
