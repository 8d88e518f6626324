"""The Anthropic API key for the LLM Coder: ``stitch/setApiKey`` and ``stitch/llmStatus``.

The client keeps the key in its secret storage and sends it with
``stitch/setApiKey {apiKey}`` (``null`` forgets it); a key in the server's own
environment is moved into memory at start, so no child process inherits it. The
key is never logged, shown, cached or written: messages only say where it came from.
"""

from __future__ import annotations

import os
from typing import Any

from stitch_lsp.coders.llm.key import ENV_VAR, KEYS
from stitch_lsp.lsp.server import StitchServer

SET_API_KEY = "stitch/setApiKey"
LLM_STATUS = "stitch/llmStatus"


def _api_key_of(params: Any) -> str | None:
    if params is None:
        return None
    if isinstance(params, dict):
        value = params.get("apiKey")
    else:
        value = getattr(params, "apiKey", None)
    return value if isinstance(value, str) else None


def register(server: StitchServer) -> None:
    KEYS.adopt_environment()

    @server.feature(SET_API_KEY)
    def set_api_key(ls: StitchServer, params: Any) -> None:
        KEYS.set_client_key(_api_key_of(params))
        source = KEYS.source()
        ls.log_message(
            "Anthropic API key: " + (
                "set from the editor's secret storage" if source == "client"
                else "cleared; using the one from the environment" if source == "environment"
                else "cleared; the LLM Coder is off until a key is set"
            )
        )

    @server.feature(LLM_STATUS)
    def llm_status(ls: StitchServer, params: Any) -> dict[str, Any]:
        settings = ls.settings
        return {
            "configured": KEYS.configured,
            "keySource": KEYS.source() or None,
            "model": settings.model,
            "coder": settings.coder,
            "rounds": settings.rounds,
            "tokenBudget": settings.token_budget,
            # Children inherit os.environ: it must not hold the key.
            "keyInChildEnvironment": bool(os.environ.get(ENV_VAR)),
        }
