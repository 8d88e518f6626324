"""Initialise, shut down, load settings from every source, and workspace trust.

Settings are rebuilt from their layers whenever one changes (``settings.build``):
defaults ← the user's config file ← ``userSettings`` (the editor's user-scope
values: ``initializationOptions.userSettings``, ``stitch/setUserSettings``) ←
``[tool.stitch]`` in the workspace's pyproject.toml ← initializationOptions ←
``workspace/configuration`` (section ``stitch``). The last three are what the
workspace can write (an editor's merged view includes its workspace settings
files), so while the workspace is untrusted they cannot name programs, pass
options that load code or point outside it (``workspace_trust``); the user is told
once what was left out. Trust is never read from those layers (a cloned
repository must not be able to trust itself): only the client sets it, through
``initializationOptions.trusted`` or ``stitch/setTrusted``.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

from lsprotocol import types as lsp
from pygls.uris import to_fs_path

from stitch_lsp.lsp import trust_message
from stitch_lsp.lsp.server import StitchServer
from stitch_lsp.lsp.text_documents import use_fast_documents
from stitch_lsp.settings import Layer, from_pyproject, from_user_config, read_settings
from stitch_lsp.workspace_trust import Ignored

log = logging.getLogger(__name__)

SET_TRUSTED = "stitch/setTrusted"
SET_USER_SETTINGS = "stitch/setUserSettings"
# (layer, can the workspace write it?, does it come from the client?), in merge order.
_LAYERS = (
    ("user config", False, False),
    ("userSettings", False, True),
    ("pyproject.toml", True, False),
    ("initializationOptions", True, True),
    ("workspace/configuration", True, True),
)
# Keys of initializationOptions that are not settings.
_OPTION_KEYS = ("trusted", "settings", "userSettings", "handles")


class SettingsLayers:
    def __init__(self) -> None:
        self.layers: dict[str, dict[str, Any]] = {name: {} for name, _, _ in _LAYERS}
        # Values dropped because the workspace is not trusted, as of the last rebuild (the reader's
        # list, with each value's origin): what a warning about them says, and what trust withdraws.
        self.untrusted: list[Ignored] = []
        self.reported: set[str] = set()
        self.pending: list[Ignored] = []  # ignored workspace values not yet told to the user
        self.ready = False  # the client's own settings are in


def _root_of(params: lsp.InitializeParams) -> Path | None:
    uri = None
    if params.workspace_folders:
        uri = params.workspace_folders[0].uri
    elif params.root_uri:
        uri = params.root_uri
    if uri:
        path = to_fs_path(uri)
        return Path(path) if path else None
    if params.root_path:
        return Path(params.root_path)
    return None


def _plain(value: Any) -> Any:
    """Params of custom messages may arrive as namedtuples: back to dicts and lists."""
    if hasattr(value, "_asdict"):
        value = value._asdict()
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _as_settings(part: Any) -> dict[str, Any]:
    part = _plain(part)
    if isinstance(part, list):  # some clients send one settings object per workspace folder
        part = part[0] if part and isinstance(part[0], dict) else {}
    return part if isinstance(part, dict) else {}


def _settings_part(options: Any) -> dict[str, Any]:
    """The settings carried in initializationOptions: ``{settings: {...}}`` or flat."""
    if not isinstance(options, dict):
        return {}
    if "settings" in options:
        return _as_settings(options["settings"])
    return {k: v for k, v in options.items() if k not in _OPTION_KEYS}


def _tell_untrusted(server: StitchServer, ignored: list[Ignored]) -> None:
    """Log each newly ignored value; the user gets one message for all of them once the client's
    settings are in (so a workspace's pyproject and its editor settings make one message, not two)."""
    layers: SettingsLayers = server.settings_layers
    for item in ignored:
        tag = f"untrusted:{item.source}:{item.key}:{item.value}"
        if tag not in layers.reported:
            layers.reported.add(tag)
            layers.pending.append(item)
            server.log_message(f"Stitch: ignored {item.describe()}; the workspace is not trusted",
                               lsp.MessageType.Warning)
    if layers.ready:
        flush_untrusted(server)


def flush_untrusted(server: StitchServer) -> None:
    layers: SettingsLayers = server.settings_layers
    layers.ready = True
    pending, layers.pending = layers.pending, []
    trust_message.tell(server, pending)


def rebuild_settings(server: StitchServer) -> None:
    layers: SettingsLayers = server.settings_layers
    built = read_settings(
        [Layer(name, layers.layers[name], workspace, client) for name, workspace, client in _LAYERS],
        root=server.root,
        trusted=server.trusted,
    )
    for name, key in built.unknown:
        tag = f"{name}:{key}"
        if tag not in layers.reported:
            layers.reported.add(tag)
            server.log_message(f"Stitch: ignored setting '{key}' from {name}", lsp.MessageType.Warning)
    for problem in built.problems:
        if problem not in layers.reported:
            layers.reported.add(problem)
            server.show_message(f"Stitch: {problem}", lsp.MessageType.Warning)
    layers.untrusted = built.untrusted
    if not built.untrusted:
        layers.pending = []  # trust arrived (or the values went): nothing left to warn about
    _tell_untrusted(server, built.untrusted)
    settings = built.settings
    if settings != server.settings:
        server.settings = settings
        log.info("settings: %s", settings)
        server.emit("settings_changed", settings)


async def pull_configuration(server: StitchServer) -> None:
    if not server.client_supports("workspace.configuration"):
        return
    scope = server.root.as_uri() if server.root else None
    try:
        result = await asyncio.wait_for(
            server.workspace_configuration_async(
                lsp.ConfigurationParams(items=[lsp.ConfigurationItem(scope_uri=scope, section="stitch")])
            ),
            timeout=5.0,
        )
    except Exception as exc:  # a client that never answers must not stall startup
        log.warning("workspace/configuration failed: %s", exc)
        return
    value = result[0] if result else None
    server.settings_layers.layers["workspace/configuration"] = value if isinstance(value, dict) else {}


def set_trusted(server: StitchServer, trusted: bool) -> None:
    if bool(trusted) == server.trusted:
        return
    server.trusted = bool(trusted)
    log.info("workspace trust: %s", server.trusted)
    if server.trusted:
        trust_message.withdraw(server)
    rebuild_settings(server)


def register(server: StitchServer) -> None:
    server.settings_layers = SettingsLayers()

    @server.feature(lsp.INITIALIZE)
    def initialize(ls: StitchServer, params: lsp.InitializeParams) -> None:
        ls.loop = asyncio.get_running_loop()
        use_fast_documents(ls.workspace)
        ls.root = _root_of(params)
        options = params.initialization_options if isinstance(params.initialization_options, dict) else {}
        ls.initialization_options = options
        ls.trusted = options.get("trusted") is True
        layers = ls.settings_layers.layers
        layers["user config"] = from_user_config()[0]
        layers["userSettings"] = _as_settings(options.get("userSettings"))
        layers["pyproject.toml"] = from_pyproject(ls.root) if ls.root else {}
        layers["initializationOptions"] = _settings_part(options)
        rebuild_settings(ls)

    @server.feature(lsp.INITIALIZED)
    async def initialized(ls: StitchServer, params: lsp.InitializedParams) -> None:
        if ls.client_supports("workspace.did_change_configuration.dynamic_registration"):
            try:
                await ls.client_register_capability_async(
                    lsp.RegistrationParams(
                        registrations=[
                            lsp.Registration(
                                id="stitch-configuration",
                                method=lsp.WORKSPACE_DID_CHANGE_CONFIGURATION,
                                register_options=lsp.DidChangeConfigurationRegistrationOptions(section="stitch"),
                            )
                        ]
                    )
                )
            except Exception as exc:
                log.warning("could not register for configuration changes: %s", exc)
        try:
            await pull_configuration(ls)
            rebuild_settings(ls)
        finally:
            flush_untrusted(ls)
            ls.mark_ready()
        ls.emit("initialized")

    @server.feature(lsp.WORKSPACE_DID_CHANGE_CONFIGURATION)
    async def did_change_configuration(ls: StitchServer, params: lsp.DidChangeConfigurationParams) -> None:
        if ls.client_supports("workspace.configuration"):
            await pull_configuration(ls)
        elif isinstance(params.settings, dict):
            raw = params.settings.get("stitch", params.settings)
            ls.settings_layers.layers["workspace/configuration"] = raw if isinstance(raw, dict) else {}
        if ls.root:
            ls.settings_layers.layers["pyproject.toml"] = from_pyproject(ls.root)
        ls.settings_layers.layers["user config"] = from_user_config()[0]
        rebuild_settings(ls)

    @server.feature(SET_USER_SETTINGS)
    def on_set_user_settings(ls: StitchServer, params: Any) -> None:
        raw = _plain(params).get("settings") if isinstance(_plain(params), dict) else None
        ls.settings_layers.layers["userSettings"] = _as_settings(raw)
        rebuild_settings(ls)

    @server.feature(SET_TRUSTED)
    def on_set_trusted(ls: StitchServer, params: Any) -> None:
        trusted = params.get("trusted") if isinstance(params, dict) else getattr(params, "trusted", None)
        if not isinstance(trusted, bool):
            log.warning("%s without a boolean 'trusted': %r", SET_TRUSTED, params)
            return
        set_trusted(ls, trusted)

    @server.feature(lsp.SHUTDOWN)
    def shutdown(ls: StitchServer, params: Any) -> None:
        ls.shutdown_hooks()
