"""Request kind -> handler module. Handler modules are imported lazily, in the worker only.

See the package docstring for how to add one.
"""

from __future__ import annotations

HANDLERS: dict[str, str] = {
    "ping": "stitch_lsp.worker.basic_handlers",
    "device_info": "stitch_lsp.worker.basic_handlers",
    "test_crash": "stitch_lsp.worker.basic_handlers",
    "verify": "stitch_lsp.worker.verify.run",
    "copy_bandwidth": "stitch_lsp.worker.copy_bandwidth_handler",
    "trace": "stitch_lsp.worker.trace_handler",
    "gemm_tune": "stitch_lsp.worker.gemm_tune_handler",
}

# Modules that serve several kinds expose ``handle_<kind>`` instead of ``handle``.
