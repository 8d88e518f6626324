"""A convolution run in channels-last whose candidate the Verifier does not pass (cuDNN's
channels-last algorithm rounds otherwise than eager's NCHW one, which TF32 makes visible) is
generated again with the convolution in NCHW, judged, and offered in its place.

The Verifier is a stand-in that judges by the candidate's layout; the task is traced once here.
"""

from __future__ import annotations

import pytest

from stitch_lsp.fuse import service as fuse_service
from stitch_lsp.fuse.service import fuse_task
from stitch_lsp.plan.conv_layout import uses_channels_last
from stitch_lsp.pipeline import Task
from stitch_lsp.settings import Settings
from stitch_lsp.verdict import Verdict
from tests.llm.verifiers import SplitVerifier, behind_compile, correct, large_trial_failed

trace_handler = pytest.importorskip("stitch_lsp.worker.trace_handler")

SOURCE = """
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(8, 16, 3)

    def forward(self, x):
        return torch.relu(self.conv(x)) * 2.0 + 1.0

def get_inputs():
    return [torch.randn(4, 8, 34, 34)]

def get_init_inputs():
    return []
"""


def Judge(channels_last: Verdict, nchw: Verdict) -> SplitVerifier:  # noqa: N802 - reads as a class
    return SplitVerifier(lambda c: uses_channels_last(c.notes), channels_last, nchw)


@pytest.fixture(autouse=True)
def traced_here(monkeypatch):
    reply = trace_handler.trace_task(SOURCE)
    assert reply.ok, reply.message
    monkeypatch.setattr(fuse_service, "trace", lambda *a, **k: reply)
    monkeypatch.delenv("STITCH_CONV_LAYOUT", raising=False)


def fuse(tmp_path, verifier):
    return fuse_task(Task(name="conv", source=SOURCE, origin_path="model.py"), Settings(), verifier=verifier,
                     workdir=tmp_path, edit_namer=lambda _o: ("stitch_kernels/fused_conv.py", "fused_conv"))


def test_a_channels_last_candidate_the_verifier_rejects_gives_way_to_nchw(tmp_path):
    verifier = Judge(large_trial_failed(0.7, 33, 65536), correct(1.3))
    outcome = fuse(tmp_path, verifier)
    first, second = verifier.seen
    assert uses_channels_last(first.notes) and not uses_channels_last(second.notes)
    assert outcome.offerable and outcome.candidate is second
    assert "convolution in NCHW" in outcome.message and "adversarial-large" in outcome.message
    assert "convolution in NCHW: in channels-last it did not pass" in outcome.plan_text
    # The edit and the candidate re-lower in NCHW for other shapes too.
    assert "_CONV_LAYOUT = 'nchw'" in second.module_source
    (module,) = [t for p, t in outcome.edit_files.items() if p.endswith("fused_conv.py")]
    assert "_CONV_LAYOUT = 'nchw'" in module
    assert (tmp_path / ".stitch" / "tasks" / outcome.task.key() / "conv_channels_last" / "verdict.json").exists()


def test_a_channels_last_candidate_that_passes_and_wins_stays(tmp_path):
    verifier = Judge(correct(1.4), correct(1.1))
    outcome = fuse(tmp_path, verifier)
    assert len(verifier.seen) == 1 and uses_channels_last(outcome.candidate.notes) and outcome.offerable
    assert not outcome.layout_fallback


def test_when_nchw_fails_too_the_first_judgement_stands_and_both_reasons_are_given(tmp_path):
    outcome = fuse(tmp_path, Judge(large_trial_failed(0.7, 33, 65536), large_trial_failed(0.7, 33, 65536)))
    assert not outcome.offerable and uses_channels_last(outcome.candidate.notes)
    assert "in NCHW: failed adversarial-large" in outcome.message


def test_a_channels_last_candidate_behind_torch_compile_is_timed_against_nchw_and_the_faster_kept(tmp_path):
    verifier = Judge(behind_compile(1.05, 0.8), correct(1.3))
    outcome = fuse(tmp_path, verifier)
    first, second = verifier.seen
    assert uses_channels_last(first.notes) and outcome.candidate is second
    assert "in channels-last it passed but ran at 0.80x torch.compile" in outcome.plan_text
    # Where channels-last was the faster of the two, it stays.
    verifier = Judge(behind_compile(1.05, 0.8), correct(1.01))
    outcome = fuse(tmp_path / "again", verifier)
    assert len(verifier.seen) == 2 and uses_channels_last(outcome.candidate.notes)
    assert "in NCHW: no faster" in outcome.layout_fallback
