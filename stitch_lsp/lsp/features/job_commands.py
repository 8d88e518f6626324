"""Commands over jobs and verdicts, and the ``stitch/status`` notification.

- ``stitch.cancelAll``: cancel every queued and running job (their workers die).
- ``stitch.showReport`` (``[uri, position]`` optional): write the verdict of the
  kernel under the cursor, else the latest verdict, as Markdown under
  ``.stitch/reports/<kernel>-<time>.md``; returns ``{"path": ...}``.
- ``stitch/status`` ``{gpu, running, queued, trusted, lastReport}`` is sent when
  jobs are queued, start or end and when trust changes (a status bar shows it).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from lsprotocol import types as lsp

from stitch_lsp.jobs import Job, JobListener
from stitch_lsp.lsp import fuse_result
from stitch_lsp.lsp.features.kernel_checks import LastVerdict, _uri_position, kernel_checks
from stitch_lsp.lsp.progress import job_queue
from stitch_lsp.lsp.server import StitchServer
from stitch_lsp.reports.verdict_report import report_path, verdict_report
from stitch_lsp.settings import Settings

log = logging.getLogger(__name__)

CANCEL_ALL = "stitch.cancelAll"
SHOW_REPORT = "stitch.showReport"
STATUS = "stitch/status"


class StatusNotifier(JobListener):
    def __init__(self, server: StitchServer) -> None:
        self.server = server
        self._scheduled = False
        self._last: dict[str, Any] | None = None

    def job_queued(self, job: Job) -> None:
        self.schedule()

    def job_started(self, job: Job) -> None:
        self.schedule()

    def job_ended(self, job: Job) -> None:
        self.schedule()

    def schedule(self, *_: Any) -> None:
        if self._scheduled:
            return
        self._scheduled = True
        self.server.call_soon(self.send)

    def payload(self) -> dict[str, Any]:
        server = self.server
        running, queued = job_queue(server).counts()
        checks = kernel_checks(server)
        device = checks._checker.known_device() if checks._checker is not None else False
        return {
            "gpu": device.name if device not in (False, None) and getattr(device, "name", "") else None,
            "running": running,
            "queued": queued,
            "trusted": server.trusted,
            "lastReport": checks.last_report,
        }

    def send(self) -> None:
        self._scheduled = False
        payload = self.payload()
        if payload == self._last:
            return
        self._last = payload
        try:
            self.server.protocol.notify(STATUS, payload)
        except Exception:
            log.exception("%s failed", STATUS)


def register(server: StitchServer) -> None:
    queue = job_queue(server)
    checks = kernel_checks(server)
    status = StatusNotifier(server)
    queue.add_listener(status)
    server.on_initialized(status.schedule)

    def settings_changed(_settings: Settings) -> None:
        status.schedule()

    server.on_settings_changed(settings_changed)

    @server.command(CANCEL_ALL)
    def cancel_all(ls: StitchServer, *args: Any) -> dict[str, Any]:
        cancelled = queue.cancel_all("cancelled by Stitch: Cancel All Jobs")
        count = len(cancelled)
        ls.show_message("Stitch: no jobs were running." if count == 0 else
                        f"Stitch: cancelled {count} job{'s' if count != 1 else ''}.", lsp.MessageType.Info)
        return {"cancelled": count}

    @server.command(SHOW_REPORT)
    def show_report(ls: StitchServer, *args: Any) -> dict[str, Any]:
        target = checks.last
        uri, position = _uri_position(ls, args)
        fuses = fuse_result.results(ls)
        fused = (fuses.by_uri.get(uri) or fuses.last) if uri is not None and ls.is_python(uri) else None
        if fused is not None and fused.report:
            # From a Python file: the report of the last fuse of a selection there.
            checks.last_report = fused.report
            status.schedule()
            return {"path": fused.report, "uri": Path(fused.report).as_uri()}
        if uri is not None and ls.is_python(uri) and fused is None:
            message = "no fuse result yet: select PyTorch code and run Stitch: Fuse Selection"
            ls.show_message(f"Stitch: {message}", lsp.MessageType.Info)
            return {"path": None, "message": message}
        if uri is not None and not ls.is_python(uri):
            pairing, name, _ = checks.pairing_at(uri, position)
            if name:
                path = pairing.cu_path if pairing is not None else ls.path_of(uri)
                st = checks.kernels.get((path, name))
                if st is None or st.verdict is None:
                    message = f"'{name}' has no verdict yet: save it (when paired) or run Stitch: Verify Kernel"
                    ls.show_message(f"Stitch: {message}", lsp.MessageType.Info)
                    return {"path": None, "message": message}
                target = LastVerdict(name, path, st.reference, st.verdict)
        if target is None:
            message = "no verdict yet: save a paired kernel or run Stitch: Verify Kernel"
            ls.show_message(f"Stitch: {message}", lsp.MessageType.Info)
            return {"path": None, "message": message}
        root = ls.root or Path(target.cu_path).parent
        out = report_path(root, target.kernel)
        text = verdict_report(target.kernel, target.verdict, source=_rel(target.cu_path, root), reference=_rel(target.reference, root))
        try:
            out.parent.mkdir(parents=True, exist_ok=True)
            tmp = out.with_suffix(".md.tmp")
            tmp.write_text(text, encoding="utf-8")
            tmp.replace(out)
        except OSError as exc:
            message = f"could not write the report to {out}: {exc}"
            ls.show_message(f"Stitch: {message}", lsp.MessageType.Error)
            return {"path": None, "message": message}
        checks.last_report = str(out)
        status.schedule()
        return {"path": str(out), "uri": out.as_uri()}


def _rel(path: str, root: Path) -> str:
    if not path:
        return ""
    try:
        return str(Path(path).resolve().relative_to(root.resolve()))
    except (ValueError, OSError):
        return path
