"""A fuse job's ending as something to act on: open the candidate, see the diff, read the report.

Every ending that generated a candidate (no GPU here, not offered, or offered) writes two files
beside the candidate under ``.stitch/tasks/<task>/`` — ``report.md`` (what was planned, generated,
compiled, checked and timed) and ``edit.diff`` (what the edit does to the user's file, or, when no
edit could be built, the candidate against the reference) — and the message says so with buttons
(``window/showMessageRequest``). The same three are code actions on the selection while its FUSE
diagnostic or the last result stands, and ``stitch.showReport`` from the Python file returns the report.
Opening is ``window/showDocument``: any editor that supports it shows the file; one that does not
still has the paths in the message.
"""

from __future__ import annotations

import difflib
import logging
from pathlib import Path
from typing import Any, Callable

from attrs import define, field
from lsprotocol import types as lsp
from pygls.uris import from_fs_path

from stitch_lsp.findings import Range
from stitch_lsp.lsp.server import StitchServer

log = logging.getLogger(__name__)

OPEN_COMMAND = "stitch.openFuseResult"
OPEN_CANDIDATE = "Open candidate"
SHOW_DIFF = "Show diff"
SHOW_REPORT = "Show report"


@define
class FuseResult:
    """What one fuse job left to look at (absolute paths)."""

    uri: str  # the Python document the selection is in
    range: Range | None
    message: str
    candidate: str = ""
    diff: str = ""
    report: str = ""
    kernel: str = ""  # the generated .cu, when there is one

    def targets(self) -> list[tuple[str, str]]:
        """(button title, path) for what exists."""
        pairs = [(OPEN_CANDIDATE, self.kernel or self.candidate), (SHOW_DIFF, self.diff), (SHOW_REPORT, self.report)]
        return [(title, path) for title, path in pairs if path and Path(path).is_file()]


@define
class FuseResults:
    by_uri: dict[str, FuseResult] = field(factory=dict)
    last: FuseResult | None = None

    def add(self, result: FuseResult) -> None:
        self.by_uri[result.uri] = result
        self.last = result


def results(server: StitchServer) -> FuseResults:
    found = getattr(server, "_stitch_fuse_results", None)
    if found is None:
        found = server._stitch_fuse_results = FuseResults()  # type: ignore[attr-defined]
    return found


# -- the files ------------------------------------------------------------------------------------
def _write(path: Path, text: str) -> bool:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(path)
        return True
    except OSError as exc:
        log.warning("could not write %s: %s", path, exc)
        return False


def unified_diff(before: str, after: str, before_name: str, after_name: str) -> str:
    return "".join(difflib.unified_diff(before.splitlines(keepends=True), after.splitlines(keepends=True),
                                        fromfile=before_name, tofile=after_name))


def edit_diff(origin_rel: str, source: str, edit: Any) -> str:
    """The diff an accepted fuse edit makes: the user's file (edited as `stitch fuse --apply` edits it), and
    each file it creates."""
    from stitch_lsp.fuse.edit import apply_text_edits

    parts = [unified_diff(source, apply_text_edits(source, edit.edits), f"a/{origin_rel}", f"b/{origin_rel}")]
    for rel, text in sorted(edit.files.items()):
        parts.append(unified_diff("", text, "/dev/null", f"b/{rel}"))
    return "".join(parts)


def fuse_report(title: str, message: str, outcome: Any, files: dict[str, str]) -> str:
    """Markdown: the ending, the plan, the generated files and, when there is one, the verdict."""
    from stitch_lsp.reports.verdict_report import verdict_report

    out = [f"# Fuse: {title}", "", message, ""]
    plan_text = getattr(outcome, "plan_text", "")
    if plan_text:
        out += ["## Plan", "", "```text", plan_text.rstrip(), "```", ""]
    if files:
        out += ["## Files", ""] + [f"- {label}: {path}" for label, path in files.items() if path] + [""]
    verdict = getattr(outcome, "verdict", None)
    if verdict is not None:
        body = verdict_report(title, verdict)
        # The verdict's own title would repeat this page's: keep its sections.
        out += [line.replace("# ", "## ", 1) if line.startswith("# ") else line for line in body.splitlines()]
    return "\n".join(out).rstrip() + "\n"


def write_result(server: StitchServer, uri: str, rng: Range | None, message: str, outcome: Any,
                 diff_of: Callable[[], str]) -> FuseResult:
    """Write ``report.md`` and ``edit.diff`` beside the candidate and remember the result for ``uri``."""
    task_dir = Path(getattr(outcome, "task_dir", "") or "")
    result = FuseResult(uri=uri, range=rng, message=message)
    if not task_dir.is_dir():
        results(server).add(result)
        return result
    candidate = task_dir / "candidate.py"
    result.candidate = str(candidate) if candidate.is_file() else ""
    kernels = sorted(task_dir.glob("*.cu"))
    result.kernel = str(kernels[0]) if kernels else ""
    try:
        diff = diff_of()
    except Exception:  # noqa: BLE001 - a diff that cannot be built must not lose the report
        log.exception("building the fuse diff failed")
        diff = ""
    if not diff:
        reference = task_dir / "reference.py"
        if reference.is_file() and candidate.is_file():
            diff = unified_diff(reference.read_text(encoding="utf-8"), candidate.read_text(encoding="utf-8"),
                                "reference.py", "candidate.py")
    if diff and _write(task_dir / "edit.diff", diff):
        result.diff = str(task_dir / "edit.diff")
    title = getattr(getattr(outcome, "task", None), "name", "") or "selection"
    files = {"candidate": result.candidate, "kernel": result.kernel, "diff": result.diff}
    if _write(task_dir / "report.md", fuse_report(title, message, outcome, files)):
        result.report = str(task_dir / "report.md")
    results(server).add(result)
    return result


# -- telling the user ----------------------------------------------------------------------------
def show_document(server: StitchServer, path: str) -> None:
    uri = from_fs_path(path) or path
    if not server.client_supports("window.show_document.support"):
        server.show_message(f"Stitch: {path}", lsp.MessageType.Info)
        return

    async def show() -> None:
        try:
            await server.window_show_document_async(lsp.ShowDocumentParams(uri=uri, take_focus=True))
        except Exception as exc:  # noqa: BLE001 - the client refused: the path is in the message
            log.warning("window/showDocument %s failed: %s", uri, exc)

    server.spawn(show(), name="show fuse result")


def announce(server: StitchServer, result: FuseResult, message: str, kind: lsp.MessageType) -> None:
    """The message with a button for each file there is; a click opens it."""
    targets = result.targets()
    if not targets:
        server.show_message(message, kind)
        return
    log.info("message to user: %s", message)

    async def ask() -> None:
        try:
            choice = await server.window_show_message_request_async(lsp.ShowMessageRequestParams(
                type=kind, message=message, actions=[lsp.MessageActionItem(title=t) for t, _ in targets]))
        except Exception as exc:  # noqa: BLE001 - a client without the request: a plain message
            log.warning("window/showMessageRequest failed: %s", exc)
            server.window_show_message(lsp.ShowMessageParams(type=kind, message=message))
            return
        title = getattr(choice, "title", None)
        for t, path in targets:
            if t == title:
                show_document(server, path)

    server.call_soon(lambda: server.spawn(ask(), name="fuse result message"))


# -- code actions and the command ----------------------------------------------------------------
def _overlaps(a: Range, b: Any) -> bool:
    return not (b.end.line < a.start.line or b.start.line > a.end.line)


def code_actions(server: StitchServer, uri: str, rng: Any, context: Any) -> list[lsp.CodeAction]:
    result = results(server).by_uri.get(uri)
    if result is None or result.range is None or not _overlaps(result.range, rng):
        return []
    labels = {OPEN_CANDIDATE: "Stitch: open the fuse candidate", SHOW_DIFF: "Stitch: show the fuse diff",
              SHOW_REPORT: "Stitch: show the fuse report"}
    return [lsp.CodeAction(title=labels[t], kind=lsp.CodeActionKind.QuickFix,
                           command=lsp.Command(title=labels[t], command=OPEN_COMMAND, arguments=[path]))
            for t, path in result.targets()]


def register(server: StitchServer) -> None:
    server.code_action_providers.append(lambda uri, rng, context: code_actions(server, uri, rng, context))

    @server.command(OPEN_COMMAND)
    def open_result(ls: StitchServer, *args: Any) -> dict[str, Any]:
        path = args[0] if args and isinstance(args[0], str) else ""
        if len(args) == 1 and isinstance(args[0], (list, tuple)) and args[0]:
            path = str(args[0][0])
        known = {p for r in results(ls).by_uri.values() for _, p in r.targets()}
        if path not in known:  # only files a fuse job wrote: the command opens nothing else
            return {"opened": None, "message": "not a fuse result of this session"}
        show_document(ls, path)
        return {"opened": path}
