"""The one message about workspace settings left out while the workspace is untrusted.

Only values the workspace set are reported (the user's own never are: ``setting_scopes``), in one
message once the client's settings are in, and each value once. A client that handles the
``stitch/untrustedSettings`` notification (it lists it in ``initializationOptions.handles``) shows
the message itself and withdraws it when the list comes back empty, which the server sends when
the workspace is trusted; any other client gets ``window/showMessage``.
"""

from __future__ import annotations

from typing import Any

import attrs

from lsprotocol import types as lsp

from stitch_lsp.lsp.server import StitchServer
from stitch_lsp.workspace_trust import Ignored, camel, summary

NOTIFICATION = "stitch/untrustedSettings"


def client_handles(server: StitchServer) -> bool:
    handles = server.initialization_options.get("handles") if isinstance(server.initialization_options, dict) else None
    return isinstance(handles, list) and NOTIFICATION in handles


def text(ignored: list[Ignored]) -> str:
    return (f"Stitch ignored settings this workspace sets, because it is not trusted (until you trust it), "
            f"{summary(ignored)}. Your own settings or the defaults apply instead.")


def _where(source: str) -> str:
    """"workspace/configuration, workspace settings" → "workspace settings": where the user set it,
    not which message carried it."""
    where = source.rsplit(", ", 1)[-1]
    return {"workspaceFolder settings": "folder settings"}.get(where, where)


def one_each(ignored: list[Ignored]) -> list[Ignored]:
    """Each left-out value once: an editor sends the same settings at start and when asked."""
    seen: dict[tuple[str, str], Ignored] = {}
    for item in ignored:
        seen.setdefault((item.key, item.value), attrs.evolve(item, source=_where(item.source)))
    return list(seen.values())


def tell(server: StitchServer, ignored: list[Ignored]) -> None:
    ignored = one_each(ignored)
    if not ignored:
        return
    message = text(ignored)
    if client_handles(server):
        payload: dict[str, Any] = {
            "message": message,
            "ignored": [{"setting": camel(i.key), "value": i.value, "source": i.source, "reason": i.reason}
                        for i in ignored],
        }
        server._stitch_untrusted_told = True  # type: ignore[attr-defined]
        server.call_soon(lambda: server.protocol.notify(NOTIFICATION, payload))
    else:
        server.show_message(message, lsp.MessageType.Warning)


def withdraw(server: StitchServer) -> None:
    """The workspace is trusted: the message no longer holds."""
    if client_handles(server) and getattr(server, "_stitch_untrusted_told", False):
        server._stitch_untrusted_told = False  # type: ignore[attr-defined]
        server.call_soon(lambda: server.protocol.notify(NOTIFICATION, {"message": "", "ignored": []}))
