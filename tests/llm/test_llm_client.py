"""The streamed API call: the real SDK against the fake Messages API over HTTP + SSE."""

from __future__ import annotations

import pytest

from stitch_lsp.coders.llm.client import LlmError, MessagesClient
from stitch_lsp.coders.llm.key import Secret
from stitch_lsp.coders.llm.prompt import system_blocks
from stitch_lsp.cancellation import CancelToken, Cancelled

from .conftest import FAKE_KEY, FAST_RETRY
from .fake_messages_api import ApiError, CutStream, Reply, StreamError

MESSAGES = [{"role": "user", "content": [{"type": "text", "text": "write a kernel"}]}]


def call(api, *, key=FAKE_KEY, statuses=None, tokens=None, cancel=None, model="claude-sonnet-4-6"):
    client = MessagesClient(Secret(key), model=model, base_url=api.base_url, retry=FAST_RETRY, timeout_s=20)
    try:
        return client.complete(system=system_blocks(), messages=MESSAGES, max_tokens=2000, cancel=cancel,
                               on_status=(statuses.append if statuses is not None else None),
                               on_tokens=(tokens.append if tokens is not None else None))
    finally:
        client.close()


def test_streams_a_reply_with_usage_and_cost(fake_api):
    api = fake_api(Reply("a" * 400, input_tokens=1000, output_tokens=100, cache_read_input_tokens=3000,
                         cache_creation_input_tokens=500))
    tokens: list[int] = []
    result = call(api, tokens=tokens)
    assert result.text == "a" * 400
    assert result.stop_reason == "end_turn"
    assert (result.usage.input_tokens, result.usage.output_tokens) == (1000, 100)
    assert (result.usage.cache_read_tokens, result.usage.cache_write_tokens) == (3000, 500)
    # claude-sonnet-4-6: $3 / $15 per MTok; cache write 1.25x, cache read 0.1x of input.
    expected = (1000 * 3 + 500 * 3 * 1.25 + 3000 * 3 * 0.1 + 100 * 15) / 1e6
    assert result.usage.cost_usd == pytest.approx(expected)
    assert tokens and tokens[-1] == 100  # progress saw the tokens grow, ending at the true count
    assert len(tokens) > 2


def test_request_is_streamed_and_marks_the_stable_prefix_for_caching(fake_api):
    api = fake_api(Reply("ok"))
    call(api)
    (request,) = api.requests
    assert request.body["stream"] is True
    assert request.body["model"] == "claude-sonnet-4-6"
    marked = request.cache_marked_blocks()
    assert any("CUDA skills guide" in block["text"] for block in marked)
    assert all(block["cache_control"] == {"type": "ephemeral"} for block in marked)


def test_429_then_success_retries_after_the_servers_delay(fake_api):
    api = fake_api(ApiError(429, retry_after_ms=20), Reply("done"))
    statuses: list[str] = []
    result = call(api, statuses=statuses)
    assert result.text == "done"
    assert result.attempts == 2
    assert len(api.requests) == 2
    assert len(statuses) == 1 and "Rate-limited" in statuses[0] and "retrying in 0.0 s (attempt 2 of 3)" in statuses[0]


def test_500_three_times_is_a_clear_failure_after_exactly_three_tries(fake_api):
    api = fake_api(ApiError(500, message="boom"), ApiError(500, message="boom"), ApiError(500, message="boom"),
                   Reply("never sent"))
    with pytest.raises(LlmError) as info:
        call(api)
    assert info.value.kind == "server"
    assert "The Anthropic API failed (500: boom)" in info.value.message
    assert "failed 3 times in a row; giving up" in info.value.message
    assert len(api.requests) == 3
    assert api.remaining == 1


def test_overloaded_http_529_and_mid_stream_overload_are_retried(fake_api):
    api = fake_api(ApiError(529), StreamError(error_type="overloaded_error"), Reply("finally"))
    statuses: list[str] = []
    result = call(api, statuses=statuses)
    assert result.text == "finally"
    assert len(api.requests) == 3
    assert all("overloaded" in s for s in statuses)
    assert "mid-stream" in statuses[1]


def test_a_stream_cut_mid_answer_is_retried_from_the_start(fake_api):
    api = fake_api(CutStream("```cuda\n__global__ void k() {", after_chars=20), Reply("whole answer"))
    statuses: list[str] = []
    result = call(api, statuses=statuses)
    assert result.text == "whole answer"  # nothing of the cut attempt leaks into the answer
    assert "connection broke mid-answer" in statuses[0]


def test_a_stream_cut_every_time_fails_clearly(fake_api):
    api = fake_api(*[CutStream("x" * 100, after_chars=50) for _ in range(3)])
    with pytest.raises(LlmError) as info:
        call(api)
    assert info.value.kind == "stream_cut"
    assert "broke mid-answer" in info.value.message and "3 times" in info.value.message


def test_bad_key_is_not_retried_and_says_what_to_do(fake_api):
    api = fake_api(Reply("unused"), api_key="sk-ant-the-right-key")
    with pytest.raises(LlmError) as info:
        call(api, key="sk-ant-a-wrong-key")
    assert info.value.kind == "bad_key"
    assert "rejected the API key" in info.value.message and "Set Anthropic API Key" in info.value.message
    assert len(api.requests) == 1
    assert "sk-ant-a-wrong-key" not in info.value.message


def test_no_key_fails_before_any_request(fake_api):
    api = fake_api(Reply("unused"))
    with pytest.raises(LlmError) as info:
        MessagesClient(None, model="claude-sonnet-4-6", base_url=api.base_url)
    assert info.value.kind == "no_key"
    assert "ANTHROPIC_API_KEY" in info.value.message
    assert api.requests == []


def test_unknown_model_is_a_clear_message(fake_api):
    api = fake_api(ApiError(404, message="model: claude-nope"))
    with pytest.raises(LlmError) as info:
        call(api, model="claude-nope")
    assert info.value.kind == "model" and "stitch.model" in info.value.message
    assert len(api.requests) == 1


def test_cancel_during_backoff_stops_at_once(fake_api):
    api = fake_api(ApiError(429, retry_after_ms=30_000), Reply("unused"))
    cancel = CancelToken()
    statuses: list[str] = []

    def cancel_on_status(note: str) -> None:
        statuses.append(note)
        cancel.cancel("user cancelled")

    client = MessagesClient(Secret(FAKE_KEY), model="claude-sonnet-4-6", base_url=api.base_url, retry=FAST_RETRY)
    with pytest.raises(Cancelled):
        client.complete(system=system_blocks(), messages=MESSAGES, max_tokens=100, cancel=cancel,
                        on_status=cancel_on_status)
    assert len(api.requests) == 1
