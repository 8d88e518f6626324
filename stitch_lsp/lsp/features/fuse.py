""""Stitch: fuse N ops into a CUDA kernel": the code action, its job, and the edit it offers.

Listing the action is pure analysis (tree-sitter, no GPU, no code run). Choosing
it runs a background job (planning → generating → compiling → checking →
timing) with work-done progress that the user can cancel; an edit of the
document cancels it. A passing, unflagged verdict is offered as one versioned
WorkspaceEdit (new kernel module, loader, the selection replaced by a call) that
the client asks the user to confirm, labelled with the measured speedups; any
other ending leaves the user's files alone and says why, on the selection.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lsprotocol import types as lsp
from pygls.uris import from_fs_path

from stitch_lsp.task.selection import prepare, shapes_for, workspace_path
from stitch_lsp.coders.llm.key import key_configured
from stitch_lsp.task.shapes import comment_block, comment_template
from stitch_lsp.analysis.region.python_region import extract_region
from stitch_lsp.findings import Finding, Fix, Position, Range, Severity, TextEdit
from stitch_lsp.jobs import JobSpec
from stitch_lsp.jobs.queue import Priority
from stitch_lsp.lsp import fuse_result
from stitch_lsp.lsp.features.record_shapes import record_action
from stitch_lsp.lsp.progress import job_queue
from stitch_lsp.lsp.server import StitchServer

if TYPE_CHECKING:
    from stitch_lsp.fuse.edit import FuseEdit
    from stitch_lsp.fuse.service import FuseOutcome

# The pipeline (planner, Coders, the Anthropic client) is imported when a fuse job first runs: the
# server answers `initialize` and publishes diagnostics without paying for it.

log = logging.getLogger(__name__)

FUSE = "stitch.fuse"
SOURCE = "fuse"
ANNOTATION = "stitch-fuse"


def _lines(rng: Range, text: str) -> tuple[int, int]:
    start, end = rng.start.line, rng.end.line
    if end > start and rng.end.character == 0:
        end -= 1  # a selection of whole lines ends at column 0 of the next one
    return start, end


class Fuser:
    def __init__(self, server: StitchServer) -> None:
        self.server = server
        self._verifier: Any = None
        self._lock = threading.Lock()

    def verifier(self) -> Any:
        with self._lock:
            if self._verifier is None:
                from stitch_lsp.jobs.kernel_check import verifier_factory

                root = self.server.root or Path.cwd()
                # Job folders and worker logs are generated files: under .stitch/ (as the jobs' Verifier).
                self._verifier = verifier_factory()(self.server.settings, Path(root) / ".stitch" / "work")
            return self._verifier

    # -- listing (instant, no GPU) ---------------------------------------------------------
    def actions(self, uri: str, rng: Range, context: Any) -> list[lsp.CodeAction]:
        if not self.server.is_python(uri) or rng.start == rng.end:
            return []
        doc = self.server.document(uri)
        if doc is None:
            return []
        start, end = _lines(rng, doc.source)
        region = extract_region(doc.source, start, end, self.server.path_of(uri))
        if region.op_count < 2 and not region.problems:
            return []
        title = f"Stitch: fuse {region.op_count} ops into a CUDA kernel"
        if region.problems:
            if region.op_count == 0 and any("no tensor ops" in p for p in region.problems):
                return []
            return [lsp.CodeAction(title=title, kind=lsp.CodeActionKind.RefactorRewrite,
                                   disabled=lsp.CodeActionDisabled(reason="; ".join(region.problems)))]
        root = Path(self.server.root) if self.server.root else None
        shapes, found = shapes_for(region, doc.source, self.server.settings, root,
                                   workspace_path(root, self.server.path_of(uri)))
        if shapes.missing and self.server.trusted and "def get_inputs" in doc.source:
            shapes.missing = []  # the job records them by running the file's get_inputs()
        if shapes.missing:
            # The template replaces a `# stitch:` comment already there (keeping what it says).
            first, line = comment_block(doc.source.splitlines(), region.range.start.line)
            comment = comment_template(region, shapes) + "\n"
            fix = lsp.CodeAction(
                title="Stitch: add a shape comment for " + ", ".join(shapes.missing),
                kind=lsp.CodeActionKind.QuickFix,
                edit=lsp.WorkspaceEdit(changes={uri: [lsp.TextEdit(
                    range=lsp.Range(start=lsp.Position(first, 0), end=lsp.Position(line, 0)), new_text=comment)]}),
            )
            note = f" ({found.note})" if found is not None and found.note else ""
            disabled = lsp.CodeAction(title=title, kind=lsp.CodeActionKind.RefactorRewrite,
                                      disabled=lsp.CodeActionDisabled(
                                          reason="; ".join(shapes.problems) or (
                                              "no shapes for " + ", ".join(shapes.missing)
                                              + ": record your program (Stitch: Record Shapes), or add a "
                                                "`# stitch: name=[dims] dtype` comment above the selection" + note)))
            return [fix, record_action(self.server), disabled]
        actions = [lsp.CodeAction(
            title=title, kind=lsp.CodeActionKind.RefactorRewrite,
            command=lsp.Command(title=title, command=FUSE, arguments=[uri, doc.version, start, end]),
        )]
        if key_configured():  # the LLM Coder's loop, whatever settings.coder says
            claude = f"{title} with Claude"
            actions.append(lsp.CodeAction(
                title=claude, kind=lsp.CodeActionKind.RefactorRewrite,
                command=lsp.Command(title=claude, command=FUSE, arguments=[uri, doc.version, start, end, "llm"]),
            ))
        return actions

    # -- running ------------------------------------------------------------------------------
    def start(self, uri: str, version: int | None, start: int, end: int, coder: str | None = None) -> dict[str, Any]:
        server = self.server
        doc = server.document(uri)
        if doc is None:
            return self._fail(uri, None, "the document is not open")
        if version is not None and doc.version is not None and doc.version != version:
            return self._fail(uri, None, "the document changed since the action was offered; select again")
        settings = server.settings
        if not server.trusted:
            return self._fail(uri, None, "Stitch runs code (tracing, kernels) only in trusted workspaces: "
                                         "trust this workspace to fuse")
        source = doc.source
        path = server.path_of(uri)
        root = Path(server.root or Path(path).parent)
        try:
            rel = str(Path(path).resolve().relative_to(root.resolve()))
        except ValueError:
            rel = path
        from stitch_lsp.fuse.edit import names_for

        prepared = prepare(source, rel, start, end, settings, root=root)
        needs_record = prepared.task is None and bool(prepared.missing_shapes) and "def get_inputs" in source
        if prepared.task is None and not needs_record:
            return self._fail(uri, prepared.region.range, prepared.problem)
        doc_version = doc.version
        server.diagnostics.set(uri, SOURCE, [])
        state: dict[str, Any] = {"prepared": prepared}

        coder = coder or settings.coder
        # Each LLM round is a model call plus a verification.
        llm_rounds = max(1, settings.rounds) if coder == "llm" or (coder == "auto" and key_configured()) else 0
        timeout_s = (settings.verify_timeout_s + 180) * (1 + llm_rounds)

        def run(cancel, report) -> FuseOutcome | None:
            # Imported here, on the job's thread: the first fuse must not hold up the server's loop.
            from stitch_lsp.fuse.service import fuse_task

            current = prepared
            if needs_record:
                # Shape source 3 (trusted workspaces only): run the file's get_inputs() under the recorder.
                from stitch_lsp.task.shapes import record
                from stitch_lsp.cancellation import ProgressEvent

                report(ProgressEvent("planning", "recording shapes: running the file's get_inputs()", 2))
                recorded, why = record(current.region, source, python=settings.python, cancel=cancel)
                if recorded is not None:
                    current = prepare(source, rel, start, end, settings, recorded, root=root)
                state["prepared"] = current
                if current.task is None:
                    state["problem"] = current.problem + (f" (shape recorder: {why})" if why else "")
                    return None
            module_path, func = names_for(current.task, settings)
            state["names"] = (module_path, func)
            return fuse_task(current.task, settings, coder=coder, verifier=self.verifier(), cancel=cancel,
                             report=report, workdir=root, edit_namer=lambda _o: (module_path, func))

        task_key = prepared.task.key() if prepared.task is not None else f"record:{start}-{end}:{doc_version}"
        spec = JobSpec(key=f"fuse:{coder}:{uri}:{task_key}",
                       title=f"Stitch: fuse {prepared.region.op_count} ops" + (" with Claude" if coder == "llm" else ""),
                       run=run, document_uri=uri, gpu=True, gpu_index=settings.gpu_index,
                       timeout_s=timeout_s)
        job = job_queue(server).submit(spec)

        def done(future: Any) -> None:
            server.call_soon(lambda: self._finish(uri, doc_version, state, future, root))

        job.future.add_done_callback(done)
        return {"job": job.id, "task": prepared.task.key() if prepared.task is not None else None}

    def _finish(self, uri, version, state: dict[str, Any], future, root: Path) -> None:
        server = self.server
        prepared = state["prepared"]
        rng = prepared.region.range
        if future.cancelled():
            return
        exc = future.exception()
        if exc is not None:
            self._fail(uri, rng, f"the fuse job ended: {exc}")
            return
        outcome: FuseOutcome | None = future.result()
        if outcome is None:
            self._fail(uri, rng, state.get("problem") or "no shapes for the selection")
            return
        module_path, func = state["names"]
        self._publish_rubric(outcome)
        no_gpu = outcome.verdict is not None and outcome.verdict.status.value == "no_gpu"
        if outcome.untuned_gemms and outcome.verdict is not None and not no_gpu:
            self._tune_gemms(outcome, root)
        doc = server.document(uri)
        if not outcome.offerable:
            message = outcome.message or "no kernel to offer"
            if no_gpu:
                message = no_gpu_message(outcome)
            result = fuse_result.write_result(server, uri, rng, message, outcome,
                                              lambda: self._diff(prepared, outcome, doc, root, module_path, func))
            self._fail(uri, rng, message, warning=no_gpu,
                       related=(outcome.plan_text.splitlines()[0],) if outcome.plan_text else (), result=result)
            return
        if doc is None or doc.version != version:
            self._fail(uri, rng, "the document changed while the kernel was being made; nothing was applied")
            return
        from stitch_lsp.fuse.edit import build_edit
        from stitch_lsp.reports.verdict_hints import generated_module_hints

        edit = build_edit(prepared.task, outcome.plan.graph, doc.source, outcome.edit_files, module_path, func,
                          indent=prepared.region.indent, returns=prepared.region.returns)
        label = f"Stitch: {outcome.message}"
        result = fuse_result.write_result(server, uri, rng, outcome.message, outcome,
                                          lambda: fuse_result.edit_diff(self._rel(uri, root), doc.source, edit))
        fuse_result.announce(server, result, label, lsp.MessageType.Info)
        params = lsp.ApplyWorkspaceEditParams(edit=self.workspace_edit(uri, version, edit, root, label), label=label)
        try:
            server.workspace_apply_edit(params)
        except Exception:
            log.exception("workspace/applyEdit failed")
            return
        # The verdict travels with the kernel: hints on the generated module, there when it is opened.
        module_file = root / module_path
        module_uri = from_fs_path(str(module_file)) or str(module_file)
        server.hints.set(module_uri, SOURCE, generated_module_hints(
            str(module_file), edit.files.get(module_path, ""), func, outcome.verdict,
            floor_us=outcome.plan.floor_us if outcome.plan is not None else None))

    def _rel(self, uri: str, root: Path) -> str:
        path = self.server.path_of(uri)
        try:
            return str(Path(path).resolve().relative_to(root.resolve()))
        except ValueError:
            return Path(path).name

    def _diff(self, prepared: Any, outcome: "FuseOutcome", doc: Any, root: Path, module_path: str, func: str) -> str:
        """The edit the candidate would make, built as on a pass (no edit is offered): for reading."""
        if doc is None or outcome.plan is None or outcome.candidate is None or not outcome.task.origin_path:
            return ""
        from stitch_lsp.fuse.edit import build_edit, edit_files

        files = outcome.edit_files or edit_files(outcome, self.server.settings, module_path, func)
        edit = build_edit(prepared.task, outcome.plan.graph, doc.source, files, module_path, func,
                          indent=prepared.region.indent, returns=prepared.region.returns)
        return fuse_result.edit_diff(self._rel(doc.uri, root), doc.source, edit)

    def _tune_gemms(self, outcome: FuseOutcome, root: Path) -> None:
        """A background job: time the GEMM-family kernels' tiles on this GPU and cache the fastest
        (``.stitch/gemm_tiles.json``); fusing again uses them. The kernel just offered keeps its tiles."""
        from stitch_lsp.fuse.service import gemm_options, tune_gemm_tiles

        server = self.server
        graph = outcome.plan.graph if outcome.plan is not None else None
        if graph is None:
            return

        def run(cancel, report) -> list[str]:
            verifier = self.verifier()
            gemm = gemm_options(server.settings, root, verifier.device_info())
            return tune_gemm_tiles(graph, gemm, verifier, cancel=cancel, report=report)

        spec = JobSpec(key=f"gemm-tune:{outcome.task.key()}", title="Stitch: measure GEMM tiles", run=run,
                       priority=Priority.BACKGROUND, gpu=True, gpu_index=server.settings.gpu_index, timeout_s=900)
        job = job_queue(server).submit(spec)

        def done(future: Any) -> None:
            if future.cancelled() or future.exception() is not None:
                return
            lines = future.result() or []
            server.call_soon(lambda: server.show_message(
                "Stitch: GEMM tiles measured (fuse again to use them): " + "; ".join(lines[:3]), lsp.MessageType.Info))

        job.future.add_done_callback(done)

    def _publish_rubric(self, outcome: FuseOutcome) -> None:
        """Rubric findings and hack flags as diagnostics on the generated files (``.stitch/tasks/...``)."""
        by_path: dict[str, list[Finding]] = {}
        for finding in outcome.findings:
            by_path.setdefault(finding.path, []).append(finding)
        for path, findings in by_path.items():
            self.server.diagnostics.set(from_fs_path(path) or path, "rubric", findings)

    def workspace_edit(self, uri: str, version: int | None, edit: FuseEdit, root: Path, label: str) -> lsp.WorkspaceEdit:
        convert = self.server.converter(uri)
        changes: list[Any] = []
        for rel_path, text in edit.files.items():
            target = root / rel_path
            file_uri = from_fs_path(str(target)) or str(target)
            keep = target.name == "__init__.py" and target.exists()
            if keep:
                continue
            changes.append(lsp.CreateFile(uri=file_uri, options=lsp.CreateFileOptions(overwrite=True),
                                          annotation_id=ANNOTATION))
            changes.append(lsp.TextDocumentEdit(
                text_document=lsp.OptionalVersionedTextDocumentIdentifier(uri=file_uri, version=None),
                edits=[lsp.AnnotatedTextEdit(range=lsp.Range(lsp.Position(0, 0), lsp.Position(0, 0)), new_text=text,
                                             annotation_id=ANNOTATION)]))
        changes.append(lsp.TextDocumentEdit(
            text_document=lsp.OptionalVersionedTextDocumentIdentifier(uri=uri, version=version),
            edits=[lsp.AnnotatedTextEdit(range=convert.range(e.range), new_text=e.new_text, annotation_id=ANNOTATION)
                   for e in edit.edits]))
        return lsp.WorkspaceEdit(
            document_changes=changes,
            change_annotations={ANNOTATION: lsp.ChangeAnnotation(label=label, needs_confirmation=True,
                                                                 description="fused kernel, verified by Stitch")},
        )

    def _fail(self, uri: str, rng: Range | None, message: str, *, warning: bool = False,
              related: tuple[str, ...] = (), result: "fuse_result.FuseResult | None" = None) -> dict[str, Any]:
        server = self.server
        kind = lsp.MessageType.Warning if warning else lsp.MessageType.Error
        if result is not None:
            fuse_result.announce(server, result, f"Stitch: {message}", kind)
        else:
            server.show_message(f"Stitch: {message}", kind)
        if rng is not None:
            server.diagnostics.set(uri, SOURCE, [Finding(
                path=server.path_of(uri), range=rng, severity=Severity.WARNING if warning else Severity.ERROR,
                code="FUSE", message=message, source="stitch", related=related)])
        return {"job": None, "message": message}


def no_gpu_message(outcome: "FuseOutcome") -> str:
    """The no-GPU ending as ``stitch fuse`` says it, less the folder: the message's buttons open it."""
    from stitch_lsp.fuse.service import no_gpu_message as said

    return said(outcome.verdict)


def register(server: StitchServer) -> None:
    fuser = Fuser(server)
    server._stitch_fuser = fuser  # type: ignore[attr-defined]
    fuse_result.register(server)
    server.code_action_providers.append(fuser.actions)

    @server.command(FUSE)
    def fuse_command(ls: StitchServer, *args: Any) -> dict[str, Any]:
        if len(args) == 1 and isinstance(args[0], (list, tuple)):
            args = tuple(args[0])
        if len(args) < 4:
            return {"job": None, "message": "stitch.fuse takes [uri, version, startLine, endLine]"}
        uri, version, start, end = args[:4]
        coder = str(args[4]) if len(args) > 4 and args[4] else None  # "llm": the "with Claude" variant
        try:
            return fuser.start(str(uri), version, int(start), int(end), coder)
        except Exception as exc:  # a bug here must not take the server down
            log.exception("stitch.fuse failed")
            return fuser._fail(str(uri), None, f"fuse failed: {type(exc).__name__}: {exc}")

    _ = (Fix, TextEdit, Position)
