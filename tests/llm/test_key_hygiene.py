"""A job run with a recognisable key: the key is sent only as the auth header, and nowhere else."""

from __future__ import annotations

import logging
import os
import subprocess
import sys

from stitch_lsp.coders.llm.coder import LlmCoder
from stitch_lsp.coders.llm.key import ApiKeyStore, Secret
from stitch_lsp.verify.worker_pool import worker_env
from stitch_lsp.verify.rubric import rubric_findings
from stitch_lsp.serde import to_json

from .candidates import BROKEN_CUDA, HACKING_MODULE, reply
from .conftest import FAKE_KEY, config_for
from .fake_messages_api import ApiError, CutStream, Reply
from .verifiers import ScriptedVerifier, compile_error, correct, flagged_at_run_time


def test_key_never_leaks_from_a_whole_job(fake_api, settings, task, plan, caplog, tmp_path):
    caplog.set_level(logging.DEBUG)  # the SDK's and httpx's debug logs included
    for name in ("anthropic", "httpx2", "httpcore2", "stitch_lsp"):
        logging.getLogger(name).setLevel(logging.DEBUG)
    api = fake_api(
        ApiError(429), CutStream(reply(), after_chars=80), Reply(reply(module=HACKING_MODULE)),
        Reply(reply(cuda=BROKEN_CUDA)), Reply(reply()),
    )
    settings = settings.replace(rounds=3)
    events = []
    def judge(candidate):
        if "torch.relu(x) *" in candidate.module_source:
            return flagged_at_run_time()
        if candidate.cuda_sources["kernel.cu"] == BROKEN_CUDA:
            return compile_error(7, 'expected a ";"')
        return correct(2.5)

    verifier = ScriptedVerifier(judge=judge)
    coder = LlmCoder(settings, verifier=verifier, api_key=Secret(FAKE_KEY), config=config_for(api))
    outcome = coder.run(task, plan, report=events.append)
    assert outcome.ok

    # Where the key must be: the auth header of every request. Nowhere in a body.
    for request in api.requests:
        assert request.headers["authorization"] == f"Bearer {FAKE_KEY}"
        assert FAKE_KEY.encode() not in request.raw_body

    findings = []
    for record in outcome.rounds:
        if record.candidate and record.verdict:
            findings += rubric_findings(record.verdict, record.candidate, module_path="m.py", kernel_path="k.cu")
    written = "\n".join([
        caplog.text,
        "\n".join(f"{e.stage} {e.message}" for e in events),
        outcome.message,
        to_json(outcome),  # what a report or the cache would hold
        repr(findings),
        repr(coder), repr(coder.__dict__),
        "\n".join(str(p.read_bytes()) for p in tmp_path.rglob("*") if p.is_file()),
    ])
    assert "Retrying" in written or "retrying" in written  # the logs and progress were really captured
    assert FAKE_KEY not in written
    assert FAKE_KEY[12:] not in written


def test_errors_from_a_bad_key_do_not_echo_it(fake_api, settings, task, plan):
    api = fake_api(Reply("unused"), api_key="sk-ant-something-else")
    outcome = LlmCoder(settings, verifier=ScriptedVerifier(), api_key=Secret(FAKE_KEY),
                       config=config_for(api)).run(task, plan)
    assert outcome.failure == "bad_key"
    assert FAKE_KEY not in outcome.message and FAKE_KEY not in to_json(outcome)


def test_secret_hides_itself():
    secret = Secret(FAKE_KEY)
    assert FAKE_KEY not in repr(secret) and FAKE_KEY not in str(secret) and FAKE_KEY not in f"{secret}"
    import pickle

    try:
        pickle.dumps(secret)
    except TypeError:
        pass
    else:
        raise AssertionError("a Secret must not pickle (worker pipes, caches)")


def test_child_processes_do_not_inherit_the_key(monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", FAKE_KEY)
    store = ApiKeyStore()
    store.adopt_environment()
    assert "ANTHROPIC_API_KEY" not in os.environ
    assert store.get().reveal() == FAKE_KEY and store.source() == "environment"
    out = subprocess.run([sys.executable, "-c", "import os; print(os.environ.get('ANTHROPIC_API_KEY'))"],
                         capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "None"
    monkeypatch.setenv("ANTHROPIC_API_KEY", FAKE_KEY)  # even if it came back, workers would not get it
    assert FAKE_KEY not in repr(worker_env())


def test_client_key_wins_and_clearing_falls_back(monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-env")
    store = ApiKeyStore()
    store.adopt_environment()
    store.set_client_key("sk-client")
    assert store.get().reveal() == "sk-client" and store.source() == "client"
    store.set_client_key(None)
    assert store.get().reveal() == "sk-env" and store.source() == "environment"
    store.set_client_key("   ")
    assert store.source() == "environment"
