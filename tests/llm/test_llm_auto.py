"""coder="auto": the template Coder first, Claude where it falls short, the best offerable candidate wins."""

from __future__ import annotations

import pytest

from stitch_lsp.coders.llm.auto import AutoCoder, make_coder
from stitch_lsp.coders.llm.key import KEYS
from stitch_lsp.pipeline import Candidate

from .candidates import GOOD_CUDA, MODULE, WRONG_CUDA, reply
from .conftest import config_for
from .fake_messages_api import Reply
from .verifiers import ScriptedVerifier, correct, incorrect


class StubTemplate:
    """Stands in for the template Coder: a fixed candidate."""

    name = "template"

    def __init__(self, uncovered: list[str] | None = None):
        self.uncovered = uncovered or []

    def generate(self, task, plan, feedback=None):
        return Candidate(MODULE.replace("_relu_scale", "_template"), {"kernel.cu": GOOD_CUDA}, coder="template",
                         uncovered_ops=list(self.uncovered))


def auto(settings, key, api, template):
    return AutoCoder(settings, api_key=key, config=config_for(api) if api else None, template=template)


def test_template_good_enough_means_no_model_call(fake_api, settings, key, task, plan):
    api = fake_api(Reply(reply()))
    outcome = auto(settings, key, api, StubTemplate()).run(task, plan, verifier=ScriptedVerifier(correct(2.3)))
    assert outcome.ok and outcome.coder == "template"
    assert api.requests == []
    assert any(s.dimension == "operator_coverage" for s in outcome.verdict.rubric)  # the template is scored too


def test_uncovered_ops_go_to_claude_and_the_faster_candidate_wins(fake_api, settings, key, task, plan):
    api = fake_api(Reply(reply()))
    verifier = ScriptedVerifier(correct(1.3), correct(2.6))
    outcome = auto(settings, key, api, StubTemplate(uncovered=["aten.relu"])).run(task, plan, verifier=verifier)
    assert outcome.ok and outcome.coder == "llm"
    assert "the template Coder's reached 1.30x" in outcome.message
    opening = "\n".join(api.requests[0].message_texts("user"))
    assert "The built-in Coder fell short: it left aten.relu in PyTorch" in opening


def test_template_kept_when_claude_does_worse(fake_api, settings, key, task, plan):
    settings = settings.replace(rounds=1)
    api = fake_api(Reply(reply(cuda=WRONG_CUDA)))
    verifier = ScriptedVerifier(correct(1.5), incorrect({"seed-1": 2.0}))
    outcome = auto(settings, key, api, StubTemplate()).run(task, plan, verifier=verifier)
    assert outcome.ok and outcome.coder == "template"
    assert "No verified candidate after 1 round" in outcome.message
    assert outcome.usage.rounds == 1 and outcome.verdict.usage.rounds == 1  # Claude's spend is still reported
    assert outcome.verdict.usage.output_tokens > 0


def test_no_key_keeps_the_template_and_says_why(settings, task, plan):
    outcome = AutoCoder(settings, api_key=None, template=StubTemplate()).run(
        task, plan, verifier=ScriptedVerifier(incorrect({"seed-2": 1.0})))
    assert not outcome.ok
    assert "not offerable" in outcome.message and "no Anthropic API key is configured" in outcome.message


def test_llm_coder_without_a_key_is_unavailable(settings, monkeypatch):
    coder_module = pytest.importorskip("stitch_lsp.coders")
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    KEYS.set_client_key(None)
    with pytest.raises(coder_module.CoderUnavailable, match="No Anthropic API key"):
        make_coder("llm", settings)


class NothingTemplate:
    name = "template"

    def generate(self, task, plan, feedback=None):
        return Candidate("", {}, coder="template", notes=["aten.cumsum has no template"],
                         uncovered_ops=["aten.cumsum"])


def test_template_with_no_kernel_hands_the_whole_task_to_claude(fake_api, settings, key, task, plan):
    api = fake_api(Reply(reply()))
    verifier = ScriptedVerifier(correct(2.2))
    outcome = auto(settings, key, api, NothingTemplate()).run(task, plan, verifier=verifier)
    assert outcome.ok and outcome.coder == "llm" and len(verifier.seen) == 1  # the empty candidate was not verified
    assert "it generated no kernel (aten.cumsum has no template)" in "\n".join(api.requests[0].message_texts("user"))


def test_template_with_no_kernel_and_no_key(settings, task, plan):
    outcome = AutoCoder(settings, api_key=None, template=NothingTemplate()).run(task, plan, verifier=ScriptedVerifier())
    assert not outcome.ok
    assert outcome.message == ("The template Coder fell short: it generated no kernel (aten.cumsum has no template). "
                               "Claude was not asked to improve on it: no Anthropic API key is configured.")


def test_no_gpu_for_the_template_spends_no_tokens(fake_api, settings, key, task, plan):
    from stitch_lsp.verdict import Verdict, VerdictStatus

    api = fake_api(Reply(reply()))
    no_gpu = Verdict(VerdictStatus.NO_GPU, summary="no CUDA device")
    outcome = auto(settings, key, api, StubTemplate()).run(task, plan, verifier=ScriptedVerifier(no_gpu))
    assert api.requests == [] and outcome.verdict.status is VerdictStatus.NO_GPU
