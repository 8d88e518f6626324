"""Started by ``stitch record`` (its folder leads PYTHONPATH for that run): install the shape recorder,
then hand over to the user's own ``sitecustomize``, if there is one."""

import atexit
import importlib.machinery
import importlib.util
import os
import sys

_here = os.path.dirname(os.path.abspath(__file__))
_root = os.environ.get("STITCH_RECORD_ROOT")
if _root:
    try:
        import _stitch_tracer

        _recorder = _stitch_tracer.Recorder(_root, os.environ.get("STITCH_RECORD_RUN", ""))
        atexit.register(_recorder.write)
        _recorder.install()
        try:  # say we ran, for `stitch record`'s summary
            with open(os.path.join(_root, ".stitch", "recordings", ".started"), "a", encoding="utf-8") as _fh:
                _fh.write(f"{os.getpid()} {os.environ.get('STITCH_RECORD_RUN', '')}\n")
        except OSError:
            pass
    except Exception as _exc:  # noqa: BLE001 - never stop the user's program
        print(f"stitch record: the recorder did not start: {_exc}", file=sys.stderr)

# The user's own program sees its own sys.path: ours leaves, and their sitecustomize (if any) runs.
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _here]
_spec = importlib.machinery.PathFinder.find_spec("sitecustomize", sys.path)
if _spec is not None and _spec.loader is not None:
    _theirs = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(_theirs)
