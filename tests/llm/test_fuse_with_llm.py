"""fuse_task with coder="llm": the fuse pipeline runs the LLM Coder's loop (trace and plan are real)."""

from __future__ import annotations

import pytest

from stitch_lsp.fuse.service import fuse_task
from stitch_lsp.coders.llm.key import KEYS

from .candidates import BROKEN_CUDA, reply
from .conftest import FAKE_KEY
from .fake_messages_api import Reply
from .verifiers import ScriptedVerifier, compile_error, correct


@pytest.fixture
def client_key(monkeypatch):
    KEYS.set_client_key(FAKE_KEY)
    yield
    KEYS.set_client_key(None)


def test_fuse_with_claude_runs_the_refine_loop(fake_api, settings, task, tmp_path, monkeypatch, client_key):
    api = fake_api(Reply(reply(cuda=BROKEN_CUDA)), Reply(reply()))
    monkeypatch.setenv("ANTHROPIC_BASE_URL", api.base_url)
    verifier = ScriptedVerifier(compile_error(7, 'expected a ";"'), correct(2.4))
    outcome = fuse_task(task, settings, coder="llm", verifier=verifier, workdir=tmp_path)

    assert outcome.plan is not None and outcome.plan.groups  # traced and planned for real
    assert len(api.requests) == 2 and len(verifier.seen) == 2
    assert outcome.candidate is not None and outcome.candidate.coder == "llm"
    assert outcome.verdict is not None and outcome.verdict.offerable
    assert outcome.verdict.usage.rounds == 2 and outcome.verdict.usage.output_tokens > 0
    assert "Claude's round-2 candidate is correct" in outcome.message
    # Rubric findings are placed on the generated files, for the editor to publish.
    assert all(f.path.startswith(outcome.task_dir) for f in outcome.findings)
    # The plan the model saw is the Planner's.
    assert "# Plan (from Stitch's Planner)" in "\n".join(api.requests[0].message_texts("user"))


def test_fuse_findings_flag_a_hack_on_the_generated_module(fake_api, settings, task, tmp_path, monkeypatch,
                                                          client_key):
    from .candidates import HACKING_MODULE

    api = fake_api(Reply(reply(module=HACKING_MODULE)))
    monkeypatch.setenv("ANTHROPIC_BASE_URL", api.base_url)
    outcome = fuse_task(task, settings.replace(rounds=1), coder="llm", verifier=ScriptedVerifier(), workdir=tmp_path)
    assert outcome.verdict is not None and outcome.verdict.hack_flags and not outcome.offerable
    hack = [f for f in outcome.findings if f.code == "HACK001"]
    assert hack and hack[0].path.endswith("candidate.py")
    assert "not offered" in outcome.message


def test_fuse_with_claude_and_no_key_says_so(settings, task, tmp_path, monkeypatch):
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    KEYS.set_client_key(None)
    outcome = fuse_task(task, settings, coder="llm", verifier=ScriptedVerifier(), workdir=tmp_path)
    assert outcome.candidate is None and "No Anthropic API key" in outcome.message


def test_key_in_the_environment_reaches_no_file_and_no_child(fake_api, settings, task, tmp_path, monkeypatch):
    """As `stitch fuse --coder llm` runs it: the key in the environment of the process itself."""
    import subprocess

    KEYS.set_client_key(None)
    monkeypatch.setenv("ANTHROPIC_API_KEY", FAKE_KEY)
    api = fake_api(Reply(reply()))
    monkeypatch.setenv("ANTHROPIC_BASE_URL", api.base_url)
    child_envs = []
    real_popen = subprocess.Popen

    def recording_popen(*args, **kwargs):
        child_envs.append(dict(kwargs.get("env") or {}))
        return real_popen(*args, **kwargs)

    monkeypatch.setattr(subprocess, "Popen", recording_popen)
    outcome = fuse_task(task, settings, coder="llm", verifier=ScriptedVerifier(correct(2.5)), workdir=tmp_path)
    assert outcome.verdict is not None and outcome.verdict.offerable
    assert api.requests[0].headers["authorization"] == f"Bearer {FAKE_KEY}"  # the key was used...
    assert child_envs and all(env and FAKE_KEY not in repr(env) for env in child_envs)  # ...not passed on
    written = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert written  # plan.json, candidate.py, verdict.json, ...
    for path in written:
        assert FAKE_KEY.encode() not in path.read_bytes(), path
