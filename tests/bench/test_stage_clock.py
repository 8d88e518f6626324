"""A task's seconds per step, from its progress events."""

from __future__ import annotations

from stitch_lsp.benchsuite.stage_clock import StageClock, step_name, top_steps
from stitch_lsp.cancellation import ProgressEvent


def test_numbered_messages_of_one_step_add_up():
    now = [0.0]
    clock = StageClock(lambda: now[0])
    for t, stage, message in [(1.0, "planning", "tracing the task"), (3.0, "checking", "trial 1 of 5"),
                              (4.0, "checking", "trial 2 of 5"), (6.0, "checking", "adversarial: zeros"),
                              (7.0, "checking", "accuracy against float64"),
                              (8.0, "timing", "torch.compile baseline compiling")]:
        now[0] = t
        clock.event(ProgressEvent(stage, message))
    now[0] = 20.0
    steps = clock.finish()
    assert steps == {"setup": 1.0, "planning: tracing the task": 2.0, "checking: trial": 3.0,
                     "checking: adversarial": 1.0, "checking: accuracy against float64": 1.0,
                     "timing: torch.compile baseline compiling": 12.0}
    assert top_steps(steps, 2) == "timing: torch.compile baseline compiling 12.0 s, checking: trial 3.0 s"


def test_a_stage_without_words_is_named_by_its_stage():
    assert step_name(ProgressEvent("profiling", "")) == "profiling"
    assert step_name(ProgressEvent("generating", "Round 2/3: asking")) == "generating: Round"
