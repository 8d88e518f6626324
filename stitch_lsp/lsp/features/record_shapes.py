""""Stitch: Record shapes": run the user's program once under the shape recorder; the hover that says where a
statement's shapes come from.

The command runs ``stitch.recordCommand`` (``python train.py --max_iters=1``) in the workspace folder, as a
background job the user can cancel. It names a program and runs the workspace's code, so it runs only in a
trusted workspace, and a workspace's own settings may set it only when trusted (``workspace_trust``). The
program gets the user's own environment (the server's, which the editor started with theirs): it is their
command. Recordings land under ``.stitch/recordings/``; the fuse action reads them first.
"""

from __future__ import annotations

import logging
import shlex
from pathlib import Path
from typing import Any

from lsprotocol import types as lsp

from stitch_lsp.task.selection import shapes_for, workspace_path
from stitch_lsp.analysis.region.python_region import extract_region
from stitch_lsp.cancellation import ProgressEvent
from stitch_lsp.findings import Position
from stitch_lsp.jobs import JobSpec
from stitch_lsp.lsp.progress import job_queue
from stitch_lsp.lsp.server import StitchServer

log = logging.getLogger(__name__)

RECORD = "stitch.recordShapes"


def record_action(server: StitchServer) -> lsp.CodeAction:
    """The quick fix beside the `# stitch:` comment where no recording gives the shapes."""
    command = server.settings.record_command.strip()
    if not command:
        return lsp.CodeAction(title="Stitch: Record shapes (set stitch.recordCommand, e.g. python train.py)",
                              kind=lsp.CodeActionKind.QuickFix,
                              disabled=lsp.CodeActionDisabled(
                                  reason="set stitch.recordCommand to the command that runs your program once"))
    title = f"Stitch: Record shapes with `{command}`"
    if not server.trusted:
        return lsp.CodeAction(title=title, kind=lsp.CodeActionKind.QuickFix, disabled=lsp.CodeActionDisabled(
            reason="recording runs your program: trust this workspace first"))
    return lsp.CodeAction(title=title, kind=lsp.CodeActionKind.QuickFix,
                          command=lsp.Command(title=title, command=RECORD, arguments=[]))


def start_recording(server: StitchServer) -> dict[str, Any]:
    from stitch_lsp.recording.run import record, split_command

    if not server.trusted:
        return _say(server, "Stitch records shapes by running your program: trust this workspace first",
                    lsp.MessageType.Warning)
    text = server.settings.record_command.strip()
    if not text:
        return _say(server, "set stitch.recordCommand to the command that runs your program once "
                            "(for example: python train.py --max_iters=1)", lsp.MessageType.Warning)
    try:
        argv = split_command(text)
    except ValueError as exc:
        return _say(server, f"stitch.recordCommand: {exc}", lsp.MessageType.Error)
    root = Path(server.root or Path.cwd())

    def run(cancel, report) -> Any:
        report(ProgressEvent("recording", f"running {shlex.join(argv)}", 1))
        tail: list[str] = []

        def output(line: str) -> None:
            tail[:] = (tail + [line])[-5:]
            log.info("record: %s", line)

        def on_start(proc) -> None:
            cancel.on_cancel(proc.kill)

        return record(argv, root, cwd=root, output=output, on_start=on_start), tail

    spec = JobSpec(key=f"record:{root}", title="Stitch: Record shapes", run=run, timeout_s=3600)
    job = job_queue(server).submit(spec)

    def done(future: Any) -> None:
        if future.cancelled():
            return
        exc = future.exception()
        if exc is not None:
            server.call_soon(lambda: _say(server, f"recording ended: {exc}", lsp.MessageType.Error))
            return
        result, tail = future.result()
        kind = lsp.MessageType.Info if result.functions else lsp.MessageType.Warning
        message = result.message
        if result.returncode not in (0, None) and tail:
            message += f"; the program's last line: {tail[-1]}"
        server.call_soon(lambda: _say(server, message, kind))

    job.future.add_done_callback(done)
    return {"job": job.id}


def _say(server: StitchServer, message: str, kind: lsp.MessageType) -> dict[str, Any]:
    server.show_message(f"Stitch: {message}", kind)
    return {"job": None, "message": message}


def shapes_hover(server: StitchServer, uri: str, position: Position) -> str | None:
    """On a statement of a Python function: where its inputs' shapes come from, and what they are."""
    doc = server.document(uri)
    if doc is None:
        return None
    region = extract_region(doc.source, position.line, position.line, server.path_of(uri))
    if not region.inputs or not region.ops or any("splits a statement" in p for p in region.problems):
        return None
    root = Path(server.root) if server.root else None
    shapes, found = shapes_for(region, doc.source, server.settings, root, workspace_path(root, server.path_of(uri)))
    known = [n for n in region.inputs if n in shapes.specs or n in shapes.scalars]
    # Without shapes, a card only where recordings exist and say something about this function (never
    # called, changed since): a workspace that never recorded gets no card on every line.
    if not known and not (found is not None and found.note and found.file
                          and (Path(server.root or ".") / ".stitch" / "recordings").is_dir()):
        return None
    lines = ["**Stitch shapes**", ""]
    for name in region.inputs:
        if name in shapes.specs:
            spec = shapes.specs[name]
            lines.append(f"- `{name}`: [{', '.join(map(str, spec.shape))}] {spec.dtype} — {shapes.sources.get(name, '')}")
        elif name in shapes.scalars:
            lines.append(f"- `{name}` = {shapes.scalars[name]} — {shapes.sources.get(name, '')}")
        else:
            lines.append(f"- `{name}`: no shapes")
    if found is not None and found.note and len(known) < len(region.inputs):
        lines += ["", found.note]
    return "\n".join(lines) + "\n"


def register(server: StitchServer) -> None:
    @server.command(RECORD)
    def record_command(ls: StitchServer, *args: Any) -> dict[str, Any]:
        try:
            return start_recording(server)
        except Exception as exc:  # a bug here must not take the server down
            log.exception("stitch.recordShapes failed")
            return _say(server, f"recording failed: {type(exc).__name__}: {exc}", lsp.MessageType.Error)

    def hover(uri: str, position: Position) -> str | None:
        if not server.is_python(uri):
            return None
        try:
            return shapes_hover(server, uri, position)
        except Exception:  # noqa: BLE001 - a hover never breaks; the log has it
            log.exception("shape hover failed")
            return None

    server.hover_providers.append(hover)
