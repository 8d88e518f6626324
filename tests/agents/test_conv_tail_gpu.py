"""On a GPU: convolutions with a fused tail (test_conv_tail_host.py's cases), run by the generated module.

The module runs the convolution in channels-last without its bias, writes the input in channels-last with its
own transpose kernel, and adds the bias in the tail kernel that reads the output (a pointwise tail reading it
transposed, or a reduction over the channels or the positions reading it in that order:
test_conv_reduction_host.py's cases); or, before a softmax over the channels, keeps NCHW and adds the bias there. Compared with eager on the device, TF32 off on both sides (cuDNN's channels-last
algorithm rounds otherwise under TF32, which is the Verifier's business, not this test's).

    python -m pytest -q -m gpu tests/agents/test_conv_tail_gpu.py
"""

from __future__ import annotations

import pytest

from stitch_lsp.plan.planner import make_plan
from stitch_lsp.coders.template import TemplateCoder
from stitch_lsp.pipeline import Task
from tests.agents.gpu_models import assert_matches_eager, reference_and_candidate
from tests.agents.test_conv_reduction_host import CASES as REDUCTIONS
from tests.agents.test_conv_tail_host import CASES, _source

pytestmark = [pytest.mark.gpu, pytest.mark.timeout(600)]

MODELS = dict(CASES) | REDUCTIONS
MODELS["conv2d-channel-softmax"] = _source("Conv2d(3, 5, 3)", "5, 1, 1", "torch.softmax(y * self.bias, dim=1)",
                                           "torch.randn(2, 3, 9, 11)")
MODELS["conv2d-large-relu-bias"] = _source("Conv2d(16, 48, 3)", "48, 1, 1", "torch.relu(y) + self.bias",
                                           "torch.randn(4, 16, 70, 66)")
# Rows of 64 contiguous channels (a warp a row), and 8192 pooled rows side by side (enough to fill the GPU).
MODELS["conv2d-large-min-channels"] = _source("Conv2d(16, 64, 3)", "64, 1, 1",
                                              "torch.tanh(torch.min(y + self.bias, dim=1, keepdim=True)[0])",
                                              "torch.randn(8, 16, 66, 70)")
MODELS["conv2d-large-global-pool"] = _source("Conv2d(16, 64, 3)", "64, 1, 1",
                                             "F.adaptive_avg_pool2d(F.gelu(y + self.bias), 1).flatten(1)",
                                             "torch.randn(128, 16, 34, 34)")


@pytest.mark.parametrize("name", sorted(MODELS))
def test_convolution_and_tail_match_eager_on_the_gpu(name, monkeypatch):
    torch = pytest.importorskip("torch")
    from stitch_lsp.worker.trace_handler import trace_task

    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", False)
    source = MODELS[name]
    reply = trace_task(source)
    assert reply.ok, reply.message
    task = Task(name=name, source=source)
    candidate = TemplateCoder().generate(task, make_plan(task, reply.graph))
    assert "convolution_nobias" in candidate.module_source  # the bias moved into a kernel
    assert ("stitch_layout_" in candidate.module_source) == ("softmax" not in name)
    ref_mod, ref, cand = reference_and_candidate(name, source, candidate.module_source)
    assert_matches_eager(ref_mod, ref.eval(), cand.eval(), cases=("random", "nan", "large"))


@pytest.mark.parametrize("name", ["resnet-blocks", "vgg-pools", "conv3d-chain"])
def test_chained_convolutions_match_eager_on_the_gpu(name, monkeypatch):
    """test_conv_chain_host.py's nets, run by the generated module: every convolution after the first takes its
    input as the kernel before it wrote it, in channels-last."""
    torch = pytest.importorskip("torch")
    from stitch_lsp.worker.trace_handler import trace_task
    from tests.agents.test_conv_chain_host import CONV3D, RESNET, VGG

    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", False)
    source = {"resnet-blocks": RESNET, "vgg-pools": VGG, "conv3d-chain": CONV3D}[name]
    reply = trace_task(source)
    assert reply.ok, reply.message
    task = Task(name=name, source=source)
    candidate = TemplateCoder().generate(task, make_plan(task, reply.graph))
    assert "writes its output so" in "\n".join(candidate.notes)
    assert candidate.module_source.count("stitch_layout_") >= 1
    ref_mod, ref, cand = reference_and_candidate(name, source, candidate.module_source)
    assert_matches_eager(ref_mod, ref.eval(), cand.eval(), cases=("random", "nan", "large"))
