"""One streamed Messages API call, with retries, cancellation, usage and clear errors.

Built on the official ``anthropic`` SDK (``client.messages.stream``). The SDK's own
retries are switched off (``max_retries=0``) so that one policy here covers both
HTTP-level failures (429, 5xx, 529 overloaded, connection errors) and failures
the SDK cannot retry because they happen after the 200 (an ``overloaded_error``
event mid-stream, a connection dropped mid-answer), and so that every wait is
reported to the user and can be cancelled.
"""

from __future__ import annotations

import logging
import random
from typing import Any, Callable

import anthropic
import httpx2
from attrs import define, field

from stitch_lsp.coders.llm.key import NO_KEY_MESSAGE, Secret, redact
from stitch_lsp.coders.llm.pricing import cost_usd
from stitch_lsp.cancellation import CancelToken, Cancelled
from stitch_lsp.verdict import Usage

log = logging.getLogger(__name__)


class LlmError(Exception):
    """A failure the user must hear about; ``message`` is written for them."""

    def __init__(self, kind: str, message: str, *, retryable: bool = False, retry_after_s: float | None = None):
        super().__init__(message)
        # no_key | bad_key | permission | billing | model | bad_request | rate_limited | overloaded | server |
        # connection | stream_cut
        self.kind = kind
        self.message = message
        self.retryable = retryable
        self.retry_after_s = retry_after_s


@define
class RetryPolicy:
    attempts: int = 4  # tries per call, the first included
    base_delay_s: float = 2.0  # doubled each retry, with jitter
    max_delay_s: float = 30.0
    max_retry_after_s: float = 90.0  # the server's retry-after is honoured up to this


@define
class TurnResult:
    text: str
    stop_reason: str | None
    usage: Usage
    model: str
    attempts: int = 1
    retried: list[str] = field(factory=list)  # why each retry happened


ProgressFn = Callable[[str], None]
TokensFn = Callable[[int], None]


class MessagesClient:
    """A streamed Messages API caller bound to one key, model and retry policy."""

    def __init__(
        self,
        api_key: Secret | None,
        *,
        model: str,
        base_url: str | None = None,
        retry: RetryPolicy | None = None,
        timeout_s: float = 600.0,
        sleep: Callable[[float], None] | None = None,
    ) -> None:
        if api_key is None or not api_key.reveal():
            raise LlmError("no_key", NO_KEY_MESSAGE)
        self._secret = api_key
        self.model = model
        self.retry = retry or RetryPolicy()
        self._sleep = sleep
        self._client = anthropic.Anthropic(
            api_key=api_key.reveal(),
            base_url=base_url,
            max_retries=0,
            timeout=httpx2.Timeout(timeout_s, connect=10.0),
        )

    def close(self) -> None:
        self._client.close()

    def __repr__(self) -> str:
        return f"MessagesClient(model={self.model!r})"

    def complete(
        self,
        *,
        system: list[dict[str, Any]],
        messages: list[dict[str, Any]],
        max_tokens: int,
        cancel: CancelToken | None = None,
        on_tokens: TokensFn | None = None,
        on_status: ProgressFn | None = None,
    ) -> TurnResult:
        """Stream one reply; retry what is worth retrying; raise ``LlmError`` otherwise."""
        cancel = cancel or CancelToken()
        retried: list[str] = []
        for attempt in range(1, self.retry.attempts + 1):
            cancel.raise_if_cancelled()
            try:
                result = self._stream_once(system, messages, max_tokens, cancel, on_tokens)
                result.attempts = attempt
                result.retried = retried
                return result
            except LlmError as err:
                if not err.retryable:
                    raise
                if attempt == self.retry.attempts:
                    raise LlmError(
                        err.kind,
                        f"{err.message} — failed {attempt} times in a row; giving up. Try again later.",
                    ) from None
                delay = self._delay(attempt, err.retry_after_s)
                retried.append(err.message)
                note = f"{err.message}; retrying in {delay:.1f} s (attempt {attempt + 1} of {self.retry.attempts})"
                log.info("Anthropic API: %s", note)
                if on_status:
                    on_status(note)
                self._wait(delay, cancel)
        raise AssertionError("unreachable")

    # -- one attempt -------------------------------------------------------------------
    def _stream_once(self, system, messages, max_tokens, cancel, on_tokens) -> TurnResult:
        # (This SDK's Messages API takes no sampling parameters such as temperature.)
        kwargs: dict[str, Any] = {"model": self.model, "max_tokens": max_tokens, "system": system, "messages": messages}
        chars = 0
        stopped = False
        try:
            with self._client.messages.stream(**kwargs) as stream:
                # Closing the response unblocks a read that waits on the network.
                unregister = cancel.on_cancel(stream.close)
                try:
                    for event in stream:
                        if cancel.cancelled:
                            raise Cancelled(cancel.reason)
                        if event.type == "text":
                            chars += len(event.text)
                            if on_tokens:
                                on_tokens(max(1, chars // 4))
                        elif event.type == "message_stop":
                            stopped = True
                    if not stopped:
                        raise LlmError(
                            "stream_cut", "The answer stream ended before the message was complete", retryable=True
                        )
                    message = stream.get_final_message()
                finally:
                    unregister()
        except Cancelled:
            raise
        except LlmError:
            raise
        except anthropic.APIStatusError as err:
            if cancel.cancelled:
                raise Cancelled(cancel.reason) from None
            raise self._status_error(err) from None
        except (anthropic.APIConnectionError, httpx2.TransportError) as err:
            if cancel.cancelled:
                raise Cancelled(cancel.reason) from None
            what = "the connection broke mid-answer" if chars else "could not reach the Anthropic API"
            raise LlmError(
                "stream_cut" if chars else "connection",
                f"{what} ({redact(type(err).__name__ + ': ' + str(err), self._secret)})",
                retryable=True,
            ) from None
        except Exception:
            if cancel.cancelled:  # whatever a stream closed under its reader raises, it was the cancel
                raise Cancelled(cancel.reason) from None
            raise
        text = "".join(block.text for block in message.content if block.type == "text")
        u = message.usage
        usage = Usage(
            input_tokens=u.input_tokens or 0,
            output_tokens=u.output_tokens or 0,
            cache_read_tokens=u.cache_read_input_tokens or 0,
            cache_write_tokens=u.cache_creation_input_tokens or 0,
        )
        usage.cost_usd = cost_usd(self.model, usage) or 0.0
        if on_tokens:
            on_tokens(usage.output_tokens)
        return TurnResult(text=text, stop_reason=message.stop_reason, usage=usage, model=message.model or self.model)

    def _status_error(self, err: anthropic.APIStatusError) -> LlmError:
        status = err.status_code
        kind = getattr(err, "type", None) or ""
        detail = redact(getattr(err, "api_message", None) or kind or str(status), self._secret)
        retry_after = _retry_after(err.response)
        # An error event inside a 200 stream carries the type, not the status.
        if status == 401 or kind == "authentication_error":
            return LlmError(
                "bad_key",
                "The Anthropic API rejected the API key (401 authentication_error). "
                "Check ANTHROPIC_API_KEY or set the key again with \"Stitch: Set Anthropic API Key\".",
            )
        if status == 403 or kind == "permission_error":
            return LlmError("permission", f"This API key may not use model {self.model} (403: {detail}).")
        if status == 402 or kind == "billing_error":
            return LlmError("billing", f"The Anthropic account cannot be billed (402: {detail}).")
        if status == 404 or kind == "not_found_error":
            return LlmError("model", f"Model {self.model!r} was not found (404: {detail}); check the stitch.model setting.")
        if status == 429 or kind == "rate_limit_error":
            return LlmError("rate_limited", f"Rate-limited by the Anthropic API (429: {detail})", retryable=True,
                            retry_after_s=retry_after)
        if status == 529 or kind == "overloaded_error":
            return LlmError("overloaded", f"The Anthropic API is overloaded ({status if status != 200 else 'mid-stream'}: "
                            f"{detail})", retryable=True, retry_after_s=retry_after)
        if status >= 500 or kind == "api_error" or status in (408, 409):
            return LlmError("server", f"The Anthropic API failed ({status}: {detail})", retryable=True,
                            retry_after_s=retry_after)
        return LlmError("bad_request", f"The Anthropic API refused the request ({status}: {detail})")

    # -- waiting -----------------------------------------------------------------------
    def _delay(self, attempt: int, retry_after_s: float | None) -> float:
        if retry_after_s is not None and retry_after_s >= 0:
            return min(retry_after_s, self.retry.max_retry_after_s)
        backoff = min(self.retry.base_delay_s * 2 ** (attempt - 1), self.retry.max_delay_s)
        return backoff * (0.75 + 0.25 * random.random())

    def _wait(self, seconds: float, cancel: CancelToken) -> None:
        if self._sleep is not None:
            self._sleep(seconds)
            cancel.raise_if_cancelled()
            return
        if cancel.wait(seconds):
            raise Cancelled(cancel.reason)


def _retry_after(response: httpx2.Response | None) -> float | None:
    if response is None or response.status_code == 200:
        return None
    headers = response.headers
    try:
        if (ms := headers.get("retry-after-ms")) is not None:
            return float(ms) / 1000.0
        if (s := headers.get("retry-after")) is not None:
            return float(s)
    except ValueError:
        return None
    return None

