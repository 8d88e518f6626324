"""Where each value of the editor's merged ``stitch`` settings came from: the ``"$scopes"`` key.

An editor answers ``workspace/configuration`` (and fills ``initializationOptions.settings``)
with one merged object: the user's own values and the workspace's side by side. Read as one
workspace layer, the user's own ``stitch.python`` would be dropped in an untrusted workspace
and the user told the workspace had set it. The VS Code extension therefore adds, inside that
object, ``"$scopes"``: setting name (as in the object, dotted: ``"python"``, ``"onSave.verify"``)
→ the scope VS Code's ``inspect()`` reports for the effective value (``"default"``, ``"user"``,
``"remote"``, ``"workspace"``, ``"workspaceFolder"``). The client computes it itself, never from
a settings file.

``split`` turns one such object into layers: the user's values (taken as the user's, also while
untrusted), then the workspace's and the folder's (screened while untrusted and reported with
where they were set). Without ``"$scopes"`` (another editor) the object stays one workspace layer,
as before.
"""

from __future__ import annotations

from typing import Any

SCOPES_KEY = "$scopes"
USER_SCOPES = ("default", "user", "remote")
# Layer names as the user knows them: they appear in the "ignored" message.
WORKSPACE_SCOPE_NAMES = {"workspace": "workspace settings", "workspaceFolder": "folder settings"}
USER_LAYER = "your settings"


def _pop_path(tree: dict[str, Any], dotted: str) -> tuple[bool, Any]:
    """Remove ``a.b.c`` from a nested dict (or the flat key ``"a.b.c"``); (found, value)."""
    if dotted in tree:
        return True, tree.pop(dotted)
    head, sep, rest = dotted.partition(".")
    node = tree.get(head)
    if not sep or not isinstance(node, dict):
        return False, None
    found, value = _pop_path(node, rest)
    if found and not node:
        tree.pop(head)
    return found, value


def _put_path(tree: dict[str, Any], dotted: str, value: Any) -> None:
    parts = dotted.split(".")
    for part in parts[:-1]:
        nxt = tree.get(part)
        if not isinstance(nxt, dict):
            nxt = tree[part] = {}
        tree = nxt
    tree[parts[-1]] = value


def _copy(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy(v) for v in value]
    return value


def split(name: str, raw: Any) -> list[tuple[str, dict[str, Any], bool]]:
    """(layer name, values, set by the workspace?) for one merged settings object, in merge order."""
    if not isinstance(raw, dict):
        return [(name, {}, True)]
    inner = raw.get("stitch") if isinstance(raw.get("stitch"), dict) else raw
    scopes = inner.get(SCOPES_KEY)
    rest = {k: _copy(v) for k, v in inner.items() if k != SCOPES_KEY}
    if not isinstance(scopes, dict):
        return [(name, rest, True)]
    user: dict[str, Any] = {}
    by_scope: dict[str, dict[str, Any]] = {}
    for key, scope in scopes.items():
        if not isinstance(key, str) or not isinstance(scope, str):
            continue
        found, value = _pop_path(rest, key)
        if not found:
            continue
        if scope in USER_SCOPES:
            _put_path(user, key, value)
        else:
            _put_path(by_scope.setdefault(scope, {}), key, value)
    layers: list[tuple[str, dict[str, Any], bool]] = [(USER_LAYER, user, False)]
    for scope, values in by_scope.items():
        layers.append((WORKSPACE_SCOPE_NAMES.get(scope, f"{scope} settings"), values, True))
    if rest:  # values the client named no scope for: the workspace's, to be safe
        layers.append((name, rest, True))
    return layers
