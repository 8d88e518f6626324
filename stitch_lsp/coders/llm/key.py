"""The Anthropic API key: held in memory only, never written, logged or passed on.

It comes from the client's secret storage (the ``stitch/setApiKey`` notification)
or from ``ANTHROPIC_API_KEY`` in the server's environment; the client's key wins.
It is deliberately not a setting: settings are logged, cached and shown.
"""

from __future__ import annotations

import os
import threading

ENV_VAR = "ANTHROPIC_API_KEY"

NO_KEY_MESSAGE = (
    "No Anthropic API key: set ANTHROPIC_API_KEY in the environment that starts the server, "
    "or run \"Stitch: Set Anthropic API Key\" in the editor (the key stays in its secret storage)."
)


class Secret:
    """A string that never shows itself in repr / str / f-strings."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return "Secret(<redacted>)"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other._value == self._value

    def __hash__(self) -> int:
        return hash(("Secret", len(self._value)))

    def __reduce__(self):  # a secret must not travel by pickle (worker pipes, caches)
        raise TypeError("a Secret cannot be pickled")


class ApiKeyStore:
    """Where the current key comes from; thread-safe, process-local."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._client_key: Secret | None = None
        self._env_key: Secret | None = None  # taken out of os.environ by adopt_environment()

    def adopt_environment(self) -> None:
        """Move ``ANTHROPIC_API_KEY`` from this process's environment into memory.

        Afterwards no child process (workers, nvcc, ncu, the user's program) inherits
        it, whatever environment its spawner passes on.
        """
        value = os.environ.pop(ENV_VAR, "").strip()
        if value:
            with self._lock:
                self._env_key = Secret(value)

    def set_client_key(self, key: str | None) -> None:
        """The key the editor sent; empty or None forgets it (the environment's key applies again)."""
        key = (key or "").strip()
        with self._lock:
            self._client_key = Secret(key) if key else None

    def get(self) -> Secret | None:
        with self._lock:
            if self._client_key is not None:
                return self._client_key
            if self._env_key is not None:
                return self._env_key
        env = os.environ.get(ENV_VAR, "").strip()
        return Secret(env) if env else None

    def source(self) -> str:
        """"client", "environment" or "" (none configured): safe to show."""
        with self._lock:
            if self._client_key is not None:
                return "client"
            if self._env_key is not None:
                return "environment"
        return "environment" if os.environ.get(ENV_VAR, "").strip() else ""

    @property
    def configured(self) -> bool:
        return bool(self.source())


# The server process's one store: the LSP layer sets it, coders read it.
KEYS = ApiKeyStore()


def redact(text: str, secret: Secret | None) -> str:
    """``text`` with every occurrence of the key replaced (for error messages from below)."""
    if secret is None or not secret.reveal():
        return text
    return text.replace(secret.reveal(), "<redacted>")


def key_configured() -> bool:
    """Whether the server has a key (the "with Claude" action is offered only then)."""
    return KEYS.configured
