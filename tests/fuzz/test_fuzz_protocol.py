"""Fuzzing the real server over stdio: malformed JSON-RPC, and random incremental edits.

One server per test takes every batch; after each, the server must still be
running and answer a hover on a known kernel correctly, and every request in the
batch must have had an answer (a result or a JSON-RPC error) within 10 s. Seeded
(``STITCH_FUZZ_SEED``); the counts come from ``tests/fuzz/budget.py``.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis import strategies as st

from tests.fuzz import budget
from tests.fuzz.driver import FuzzSession
from tests.fuzz.strategies import edit_sequences, frames

BATCH = 25  # frames between two hover checks
SEQUENCES_PER_BATCH = 4  # edit sequences between two hover checks
FUZZ = settings(
    database=None, deadline=None, derandomize=False, print_blob=True,
    # No shrinking: one server takes every batch, so a batch that killed it cannot be re-run alone.
    # A failure prints the whole batch and the seed; its cause becomes a test in test_fuzz_regressions.py.
    phases=[Phase.explicit, Phase.generate], report_multiple_bugs=False,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.function_scoped_fixture,
                           HealthCheck.large_base_example],
)


@pytest.fixture(scope="module")
def session(tmp_path_factory):
    s = FuzzSession(tmp_path_factory.mktemp("fuzz"))
    yield s
    code = s.close()
    assert code == 0, f"the server did not shut down cleanly after the fuzzing (exit {code})"


@pytest.mark.timeout(600)
def test_malformed_and_odd_messages(session):
    known = session.known

    @seed(budget.SEED)
    @settings(FUZZ, max_examples=math.ceil(budget.MESSAGES / BATCH))
    @given(batch=st.lists(frames(known), min_size=BATCH, max_size=BATCH))
    def batch_of_frames(batch):
        session.send_frames(batch)

    before = session.frames
    batch_of_frames()
    sent = session.frames - before
    print(f"\nfuzz: {sent} frames, {len(session.hover_ms)} hover checks, internal errors shown: "
          f"{len(session.internal_errors)}")
    assert sent >= budget.MESSAGES
    assert session.internal_errors == []


@pytest.mark.timeout(600)
def test_random_edit_sequences(session):
    @seed(budget.SEED)
    @settings(FUZZ, max_examples=math.ceil(budget.SEQUENCES / SEQUENCES_PER_BATCH))
    @given(batch=st.lists(edit_sequences(), min_size=SEQUENCES_PER_BATCH, max_size=SEQUENCES_PER_BATCH))
    def batch_of_sequences(batch):
        session.run_edits(batch)

    before = session.sequences
    batch_of_sequences()
    print(f"\nfuzz: {session.sequences - before} edit sequences")
    assert session.sequences - before >= budget.SEQUENCES
    assert session.internal_errors == []
