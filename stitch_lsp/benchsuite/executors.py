"""Which executor runs a bench: this machine's GPUs, or a Ray cluster's (its module is imported only then)."""

from __future__ import annotations

from stitch_lsp.benchsuite.executor import Executor, LocalExecutor


def make_executor(cluster: str | None, gpus: int | None = None) -> Executor:
    """``cluster``: None for this machine; a Ray address (``ray://HOST:PORT``, ``HOST:PORT``, ``auto``)."""
    if cluster is None:
        return LocalExecutor(gpus)
    from stitch_lsp.benchsuite.ray_executor import RayExecutor

    return RayExecutor(cluster, gpus=gpus)
