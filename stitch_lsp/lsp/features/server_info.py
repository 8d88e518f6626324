"""``stitch/serverInfo`` (and the ``stitch.serverInfo`` command): what this server is and sees.

Used by the client's status bar and by tests (``torchLoaded`` must stay false:
the server process never imports torch).
"""

from __future__ import annotations

import os
import sys
from typing import Any

from stitch_lsp import __version__
from stitch_lsp.lsp.server import StitchServer
from stitch_lsp.serde import to_dict
from stitch_lsp.verify.nvcc import detect_gpu, nvcc_version

SERVER_INFO = "stitch/serverInfo"


def register(server: StitchServer) -> None:
    async def info() -> dict[str, Any]:
        await server.wait_ready(timeout=5.0)
        nvcc = await server.run_in_thread(nvcc_version, server.settings.nvcc_path, pool="process")
        gpu = await server.run_in_thread(detect_gpu, pool="process")
        return {
            "version": __version__,
            "pid": os.getpid(),
            "python": sys.executable,
            "torchLoaded": "torch" in sys.modules,
            "trusted": server.trusted,
            "nvcc": {"path": nvcc.path, "version": nvcc.version} if nvcc else None,
            "gpu": gpu.name if gpu else None,
            "features": list(server.registered_features),
            "root": str(server.root) if server.root else None,
            "settings": to_dict(server.settings),
            # Workspace values left out while untrusted, each with where it came from (empty once trusted).
            "untrustedSettings": [
                {"setting": i.key, "value": i.value, "source": i.source, "reason": i.reason}
                for i in getattr(getattr(server, "settings_layers", None), "untrusted", [])
            ],
        }

    @server.feature(SERVER_INFO)
    async def server_info(ls: StitchServer, params: Any) -> dict[str, Any]:
        return await info()

    @server.command("stitch.serverInfo")
    async def server_info_command(ls: StitchServer, *args: Any) -> dict[str, Any]:
        return await info()
