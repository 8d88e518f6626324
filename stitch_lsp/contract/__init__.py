"""The worker contract: everything a worker process is asked and answers, as plain data (no torch).

The server side (``verify``, ``fuse``, ``benchsuite``, ``task``) and the worker
(``stitch_lsp.worker``) both import this package, and nothing else of each other:

- ``frames``: the wire protocol, length-prefixed JSON frames (request, progress, reply);
- ``verify``: the ``verify`` job and its options;
- ``memory_plan``: the Verifier's memory plan and its constants (the worker fits its phases with it);
- ``trace``: the ``trace`` request (a task's aten graph) and the shape recorder's ``record`` request;
- ``gemm_tune``: the ``gemm_tune`` request (time the GEMM family's candidate tiles);
- ``copy_bandwidth``: the ``copy_bandwidth`` request (the device's copy rate).

Code that starts a worker module as a process (``python -m ...``) names it here, so the
import rules (ARCHITECTURE.md, tests/architecture) see every way into the worker.
"""

from __future__ import annotations

WORKER = "stitch_lsp.worker"  # the pooled worker: answers the request kinds over frames
TRACE_WORKER = "stitch_lsp.worker.trace_handler"  # one trace: a task's source (or a TraceRequest) on stdin
SHAPE_RECORDER = "stitch_lsp.worker.shape_recorder"  # runs the user's program, records the shapes it saw
RUN_TARGET = "stitch_lsp.worker.run_target"  # one forward under Nsight Compute or compute-sanitizer
