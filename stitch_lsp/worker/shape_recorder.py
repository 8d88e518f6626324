"""Request kind ``record_shapes``: run a file's own entry point and record the shapes at a line.

For selections in the middle of a ``forward`` whose inputs are intermediate values,
no static source knows their shapes. In trusted workspaces only, this builds the
enclosing module the way the file does (``Model(*get_init_inputs())`` for the class,
``get_inputs()`` for its inputs), on the meta device (no memory, no compute), runs it,
and records the tensors' shapes and dtypes (and plain numbers) among the locals when
execution first reaches the selected line. Runs in a worker with a timeout.
"""

from __future__ import annotations

import sys
import types
from typing import Any

from stitch_lsp.contract.trace import RecordReply, RecordRequest


def record(req: RecordRequest) -> RecordReply:
    import torch

    module = types.ModuleType("stitch_recorded")
    module.__file__ = req.path
    try:
        code = compile(req.source, req.path, "exec")
        with torch.device("meta"):
            exec(code, module.__dict__)
    except Exception as exc:
        return RecordReply(ok=False, message=f"the file does not import: {type(exc).__name__}: {exc}")
    get_inputs = module.__dict__.get("get_inputs")
    if get_inputs is None:
        return RecordReply(ok=False, message="the file has no get_inputs() to run it with")
    target_line = req.line + 1
    found: dict[str, Any] = {}

    def tracer(frame, event, arg):
        if frame.f_code.co_filename != req.path or frame.f_code.co_name != req.function:
            return None
        def local(frame, event, arg):
            if event == "line" and frame.f_lineno == target_line and not found:
                found.update(frame.f_locals)
            return local
        return local

    try:
        with torch.device("meta"):
            inputs = list(get_inputs())
            # The file's entry point: its Model (KernelBench), else the selection's own module class.
            # A selected free function is recorded when the model's forward calls it.
            entry = "Model" if "Model" in module.__dict__ else req.class_name
            if not entry or entry not in module.__dict__:
                return RecordReply(ok=False, message="the file has no Model (or module class) for get_inputs() to feed")
            init = list(module.__dict__["get_init_inputs"]()) if "get_init_inputs" in module.__dict__ else []
            runner = module.__dict__[entry](*init)
            sys.settrace(tracer)
            try:
                runner(*inputs)
            finally:
                sys.settrace(None)
    except Exception as exc:
        if not found:
            return RecordReply(ok=False, message=f"running the file's entry point failed: {type(exc).__name__}: {exc}")
    if not found:
        return RecordReply(ok=False, message=f"execution never reached line {target_line}")
    reply = RecordReply(ok=True)
    for name in req.names:
        v = found.get(name)
        if isinstance(v, torch.Tensor):
            reply.shapes[name] = ([int(d) for d in v.shape], str(v.dtype).removeprefix("torch."))
        elif isinstance(v, (int, float)) and not isinstance(v, bool):
            reply.values[name] = repr(v)
    return reply


def handle(payload: Any, ctx: Any) -> RecordReply:
    from stitch_lsp.serde import from_dict

    return record(from_dict(payload, RecordRequest))


def main() -> int:
    """``python -m stitch_lsp.worker.shape_recorder < request.json``: the reply as JSON."""
    from stitch_lsp.serde import from_json, to_json

    print(to_json(record(from_json(sys.stdin.read(), RecordRequest))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
