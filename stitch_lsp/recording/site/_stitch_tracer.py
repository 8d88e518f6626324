"""The shape recorder, running inside the user's own program (stdlib only; torch is never imported).

For each function of the workspace's own files it snapshots, at each line the first
few calls reach, what the locals are: tensors (shape, dtype, device, strides),
int / float / bool / str scalars, short tuples of ints, and objects' scalar
attributes (a config, ``self``). Frames of any other file get no local tracer, and
a function stops being traced after ``CALLS`` calls, so the cost stays small. At
exit it writes one JSON file per function under ``<workspace>/.stitch/recordings/``.
"""

from __future__ import annotations

import json
import math
import os
import sys
import threading
import time
import types

from _stitch_spans import function_spans

CALLS = 3  # calls of one function that are traced (a branch the first call skips may run in a later one)
_SKIP_PARTS = ("site-packages", "dist-packages", ".venv", "venv", ".stitch", "node_modules", ".git")
_OPAQUE = (types.FunctionType, types.MethodType, types.BuiltinFunctionType, types.ModuleType, type,
           types.GeneratorType, types.CodeType, types.FrameType)


class Recorder:
    def __init__(self, root: str, run_id: str) -> None:
        self.root = os.path.realpath(root)
        self.run_id = run_id
        self.ours: dict[object, bool] = {}  # code object -> is it the workspace's own
        self.calls: dict[object, int] = {}
        self.lines: dict[object, dict[int, dict]] = {}
        self.started = time.time()

    # -- which code is the workspace's -------------------------------------------------------------
    def _own(self, code) -> bool:
        name = code.co_filename
        if not name or name.startswith("<") or code.co_name.startswith("<"):
            return False
        path = os.path.realpath(name)
        if not path.startswith(self.root + os.sep):
            return False
        parts = os.path.relpath(path, self.root).split(os.sep)
        return not any(p in _SKIP_PARTS for p in parts[:-1])

    # -- trace functions ---------------------------------------------------------------------------
    def call(self, frame, event, arg):
        code = frame.f_code
        own = self.ours.get(code)
        if own is None:
            own = self.ours[code] = self._own(code)
        if not own:
            return None
        n = self.calls.get(code, 0)
        if n >= CALLS:
            return None
        self.calls[code] = n + 1
        return self.line

    def line(self, frame, event, arg):
        if event == "line":
            per = self.lines.setdefault(frame.f_code, {})
            number = frame.f_lineno
            if number not in per:
                try:
                    per[number] = snapshot(frame.f_locals)
                except Exception:  # noqa: BLE001 - the user's program must run as it would without us
                    per[number] = {}
        return self.line

    def install(self) -> None:
        threading.settrace(self.call)
        sys.settrace(self.call)

    # -- writing -----------------------------------------------------------------------------------
    def write(self) -> None:
        sys.settrace(None)
        by_file: dict[str, list] = {}
        for code, lines in self.lines.items():
            by_file.setdefault(os.path.realpath(code.co_filename), []).append((code, lines))
        out_root = os.path.join(self.root, ".stitch", "recordings")
        for path, codes in by_file.items():
            try:
                with open(path, encoding="utf-8") as fh:
                    spans = function_spans(fh.read())
            except (OSError, UnicodeDecodeError):
                continue
            rel = os.path.relpath(path, self.root)
            for code, lines in codes:
                span = spans.get(code.co_firstlineno)
                if span is None:
                    continue
                qualname, first, last, sha = span
                target = os.path.join(out_root, rel, qualname + ".json")
                record = {"path": rel.replace(os.sep, "/"), "function": qualname, "first_line": first,
                          "last_line": last, "sha": sha, "run": self.run_id, "calls": self.calls.get(code, 0),
                          "argv": list(sys.argv), "python": sys.version.split()[0],
                          "lines": {str(k): v for k, v in sorted(lines.items())}}
                try:
                    os.makedirs(os.path.dirname(target), exist_ok=True)
                    old = _read(target)
                    if old and old.get("run") == self.run_id and old.get("sha") == sha:
                        # Another process of the same run (a subprocess, a worker) saw it too: keep both.
                        for k, v in old.get("lines", {}).items():
                            record["lines"].setdefault(k, v)
                    tmp = f"{target}.{os.getpid()}.tmp"
                    with open(tmp, "w", encoding="utf-8") as fh:
                        json.dump(record, fh, indent=0, sort_keys=True)
                    os.replace(tmp, target)
                except OSError:
                    continue


def _read(path: str) -> dict | None:
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    except (OSError, ValueError):
        return None


def _scalar(v):
    t = type(v)
    if t is bool:
        return {"k": "bool", "v": v}
    if t is int:
        return {"k": "int", "v": v}
    if t is float:
        return {"k": "float", "v": v if math.isfinite(v) else repr(v)}
    if v is None:
        return {"k": "none"}
    if t is str and len(v) <= 200:
        return {"k": "str", "v": v}
    return None


def describe(v):
    s = _scalar(v)
    if s is not None:
        return s
    t = type(v)
    module = getattr(t, "__module__", "") or ""
    if module.startswith("torch") and hasattr(v, "shape") and hasattr(v, "dtype") and hasattr(v, "stride"):
        try:
            return {"k": "tensor", "shape": [int(d) for d in v.shape], "dtype": str(v.dtype).replace("torch.", ""),
                    "device": str(v.device), "stride": [int(d) for d in v.stride()]}
        except Exception:  # noqa: BLE001 - sparse / nested tensors have no strides
            return None
    if isinstance(v, (tuple, list)) and len(v) <= 8 and all(type(e) is int for e in v):
        return {"k": "ints", "v": list(v)}
    if isinstance(v, _OPAQUE) or not hasattr(v, "__dict__"):
        return None
    attrs = {}
    try:
        items = list(vars(v).items())[:200]
    except TypeError:
        return None
    for name, value in items:
        if name.startswith("__"):
            continue
        d = _scalar(value)
        if d is None and isinstance(value, (tuple, list)) and len(value) <= 8 and all(type(e) is int for e in value):
            d = {"k": "ints", "v": list(value)}
        if d is not None:
            attrs[name] = d
    return {"k": "object", "class": t.__qualname__, "module": module, "attrs": attrs}


def snapshot(local_vars: dict) -> dict:
    out = {}
    for name, value in list(local_vars.items()):
        d = describe(value)
        if d is not None:
            out[name] = d
    return out
