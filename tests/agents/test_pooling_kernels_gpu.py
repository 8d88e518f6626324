"""On a GPU: the pooling kernels of test_template_pooling_host.py, built by NVRTC and run against eager on the
same device, on random and adversarial inputs (NaN and ±Inf planted: a max propagates NaN, padding never wins).
The long-row models run the kernel that stages its input span in shared memory.

    python -m pytest -q -m gpu tests/agents/test_pooling_kernels_gpu.py
"""

from __future__ import annotations

import pytest

from stitch_lsp.plan.planner import make_plan
from stitch_lsp.coders.template import TemplateCoder
from stitch_lsp.pipeline import Task
from tests.agents.gpu_models import assert_matches_eager, reference_and_candidate
from tests.agents.test_template_pooling_host import MODELS, _source

pytestmark = [pytest.mark.gpu, pytest.mark.timeout(600)]


@pytest.mark.parametrize("name", sorted(MODELS))
def test_pooling_kernel_matches_eager_on_the_gpu(name):
    pytest.importorskip("torch")
    from stitch_lsp.worker.trace_handler import trace_task

    source = _source(name)
    reply = trace_task(source)
    assert reply.ok, reply.message
    task = Task(name=name, source=source)
    candidate = TemplateCoder().generate(task, make_plan(task, reply.graph))
    staged = "stg_span" in candidate.module_source
    assert staged == ("staged" in name), "long rows, and only they, stage their span"
    assert_matches_eager(*reference_and_candidate(name, source, candidate.module_source),
                         cases=("random", "nan", "inf", "large"))
