"""The worker: a child process that owns the GPU and runs user and generated code.

It is the only part of Stitch (with ``runtime/``) that imports torch. The server
never imports this package's handler modules; it talks to a worker through
``stitch_lsp.verify.worker_pool.WorkerPool`` over the frames of
``stitch_lsp.contract.frames`` (length-prefixed JSON on the child's stdin/stdout;
the child moves ``sys.stdout`` onto stderr first, so a candidate's ``print``
cannot corrupt the pipe).

A worker is reused between jobs (torch import and CUDA context are paid once).
A job that faults, segfaults, aborts, hangs, runs out of memory or is cancelled
costs that worker: the pool kills its whole process group and the next job gets
a fresh one. So does a job whose handler raised, and one after which device
memory is still allocated beyond what a handler declares it keeps
(``ctx.state["kept_cuda_bytes"]``) or the CUDA context is unusable: no job starts
with another's allocations.

Adding a request kind
---------------------
1. Put the request and reply data classes in the worker contract
   (``stitch_lsp/contract/``, plain data the server imports without torch);
   attrs classes serialised by ``stitch_lsp.serde``.
2. Write ``stitch_lsp/worker/<name>_handler.py`` with
   ``def handle(payload: dict, ctx: WorkerContext) -> object``: structure the
   payload with ``serde.from_dict(payload, YourRequest)``, do the work (import
   torch inside the function or at module top: this module only runs in the
   worker), report stages with ``ctx.progress(stage, message, percent)``, and
   return your reply object (any attrs instance or JSON-able value). Raise for
   bugs; the pool turns an exception into ``WorkerError`` (and replaces the worker). Call
   ``ctx.retire(reason)`` when the process must not be reused (poisoned CUDA
   context, leaked threads).
3. Register it in ``HANDLERS`` in ``stitch_lsp/worker/handlers.py``:
   ``"trace": "stitch_lsp.worker.trace_handler"``.
4. From the server side::

       pool = WorkerPool(settings)          # or the Verifier's: verifier.pool
       reply = pool.call("trace", TraceRequest(...), TraceReply,
                         timeout_s=60, cancel=token, report=reporter)

   ``call`` raises ``WorkerDied`` (``.reason`` is "crashed", "timeout",
   "out_of_memory" or "cancelled") when the worker did not survive, and
   ``WorkerError`` when the handler raised. Both are plain exceptions with a
   message fit for a user.

Built-in kinds: ``ping`` (echo, for tests), ``device_info``, ``verify``
(``stitch_lsp.worker.verify``), ``run_candidate`` (used under ncu /
compute-sanitizer), and ``test_crash`` (CPU stand-ins for crash handling).
"""
