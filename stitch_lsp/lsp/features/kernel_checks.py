"""On-save verification of paired handwritten kernels, and the verify / profile commands.

- Pairing (``// stitch: reference=...`` above a kernel, or ``[[tool.stitch.pair]]``)
  is read on every fresh analysis: its problems are diagnostics at once (static,
  also in untrusted workspaces).
- On save — only in a trusted workspace and with ``onSave.verify`` — each paired
  kernel becomes a job (GPU, on-save priority); saving again supersedes it, an edit
  or a close cancels it. ``stitch.verifyKernel`` / ``stitch.profileKernel`` do the
  same for the kernel under the cursor at user priority.
- Results: inlay hints on the kernel (correctness, speedups, % of peak) and
  diagnostics (failing checks, sanitizer findings at their lines, anti-hacking and
  rubric findings, why a run did not finish). Verdicts come from the result cache
  where the same question was answered before, also after a restart.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import Any

from attrs import define, field
from lsprotocol import types as lsp

from stitch_lsp.findings import Finding, Hint, Position, Range, Severity
from stitch_lsp.jobs import Job, JobCancelled, JobSpec, JobTimedOut, Priority
from stitch_lsp.jobs.kernel_check import VERIFIER_ENV, CheckRequest, CheckResult, KernelChecker
from stitch_lsp.jobs.pairing import Pairing, PairingResult, pair_kernels
from stitch_lsp.lsp.progress import job_queue
from stitch_lsp.lsp.server import StitchServer
from stitch_lsp.reports.kernel_card import badge
from stitch_lsp.reports.verdict_hints import status_hint, verdict_hints
from stitch_lsp.settings import Settings
from stitch_lsp.verdict import Verdict, VerdictStatus

log = logging.getLogger(__name__)

PAIRING_SOURCE = "pairing"
VERIFY_SOURCE = "verify"
VERIFY_COMMAND = "stitch.verifyKernel"
PROFILE_COMMAND = "stitch.profileKernel"

UNTRUSTED = "verification off: workspace not trusted"
NO_GPU = "no GPU"
NO_GPU_TIP = (
    "No NVIDIA GPU on this machine (nvidia-smi finds none), so paired kernels are not verified or timed here; "
    "compiles and static checks still run. Verification starts on save on a machine with a GPU."
)
UNTRUSTED_TIP = (
    "Stitch runs nothing in a workspace the editor has not trusted: no reference imports, no kernel launches. "
    "Static checks and compiles still work. Trust the workspace to verify this kernel on save."
)


@define
class KernelState:
    """What is known about one paired kernel's checks."""

    verdict: Verdict | None = None
    cached: bool = False
    when: float = 0.0
    job: Job | None = None
    message: str = ""  # why the last run ended without a verdict
    profile: bool = False  # the running job profiles
    reference: str = ""


@define
class LastVerdict:
    kernel: str
    cu_path: str
    reference: str
    verdict: Verdict
    when: float = field(factory=time.time)


class KernelChecks:
    def __init__(self, server: StitchServer) -> None:
        self.server = server
        self.queue = job_queue(server)
        self._checker: KernelChecker | None = None
        self.pairings: dict[str, PairingResult] = {}  # uri -> pairing of its current text
        self.kernels: dict[tuple[str, str], KernelState] = {}  # (path, kernel) -> state
        self.last: LastVerdict | None = None
        self.last_report: str | None = None
        # What was last shown per (uri, source): unchanged results are not re-sent on every keystroke.
        self._shown: dict[tuple[str, str, int], list[Any]] = {}

    # -- plumbing ---------------------------------------------------------------------------------
    def checker(self, near: str = "") -> KernelChecker:
        if self._checker is None:
            # Without a workspace folder (a single file opened), the file's folder plays its part.
            root = self.server.root or (Path(near).parent if near else Path.cwd())
            self._checker = KernelChecker(root, self.server.settings)
        return self._checker

    def state(self, path: str, kernel: str) -> KernelState:
        return self.kernels.setdefault((path, kernel), KernelState())

    def pair(self, uri: str, analysis: Any = None) -> PairingResult | None:
        server = self.server
        doc = server.document(uri)
        if doc is None or not server.is_cuda(uri):
            return None
        if "stitch:" not in doc.source and not server.settings.pair:
            result = PairingResult()  # the common case, at the cost of one substring search
            self.pairings[uri] = result
            return result
        if analysis is None:
            analysis = server.cuda.get(uri)
        if analysis is None:
            return None
        kernels = [k for k in analysis.kernels if getattr(k, "is_global", True) and k.body_range is not None]
        result = pair_kernels(
            Path(server.path_of(uri)), doc.lines, kernels, root=server.root, pyproject_pairs=server.settings.pair
        )
        self.pairings[uri] = result
        return result

    # -- hooks ----------------------------------------------------------------------------------------
    def _show(self, uri: str, source: str, items: list[Any], store: Any) -> None:
        key = (uri, source, id(store))
        if self._shown.get(key) == items:
            return
        self._shown[key] = list(items)
        store.set(uri, source, items)

    def on_analysis(self, uri: str, analysis: Any) -> None:
        result = self.pair(uri, analysis)
        if result is None:
            return
        self._show(uri, PAIRING_SOURCE, result.findings, self.server.diagnostics)
        self.refresh(uri)

    async def gpu_absent(self) -> bool:
        """True when this machine has no GPU to verify on (asked once; a verify job would only end "no_gpu")."""
        if os.environ.get(VERIFIER_ENV):  # a test's stand-in Verifier decides for itself
            return False
        known = self._checker.known_device() if self._checker is not None else False
        if known is not False:
            return known is None
        from stitch_lsp.verify.nvcc import detect_gpu

        return await self.server.run_in_thread(detect_gpu, self.server.settings.gpu_index, pool="process") is None

    def tell_no_gpu(self, pairs: list[Pairing], *, asked: bool = False) -> None:
        """The hint on each kernel at once; the message once a session (and each time the user asks)."""
        for pairing in pairs:
            self.state(pairing.cu_path, pairing.kernel).message = NO_GPU_TIP
        if asked:
            self.server.show_message(f"Stitch: {NO_GPU_TIP}", lsp.MessageType.Info)
        else:
            self.server.show_message_once("no-gpu", f"Stitch: {NO_GPU_TIP}", lsp.MessageType.Info)

    async def on_save(self, uri: str) -> None:
        server = self.server
        if not server.is_cuda(uri):
            return
        await server.wait_ready()  # the client's settings decide what runs on save
        await server.cuda.settle(uri, exact=True)  # pairing reads the saved text's analysis
        result = self.pair(uri)
        if result is None:
            return
        self._show(uri, PAIRING_SOURCE, result.findings, server.diagnostics)
        if server.trusted and server.settings.on_save.verify and result.pairs and await self.gpu_absent():
            self.tell_no_gpu(result.pairs)
        elif server.trusted and server.settings.on_save.verify:
            on_save = server.settings.on_save
            for pairing in result.pairs:
                self.submit(uri, pairing, Priority.ON_SAVE, profile=on_save.profile, sanitize=on_save.sanitize)
        self.refresh(uri)

    def on_close(self, uri: str) -> None:
        self.pairings.pop(uri, None)
        for key in [k for k in self._shown if k[0] == uri]:
            del self._shown[key]

    def on_settings_changed(self, settings: Settings) -> None:
        if not self.server.trusted:
            # Trust withdrawn: whatever runs user code stops now, warm workers included.
            self.queue.cancel_all("the workspace is no longer trusted")
            if self._checker is not None:
                self._checker.close()
        if self._checker is not None:
            self._checker.update_settings(settings)
        for uri in list(self.pairings):
            self.on_analysis(uri, None)

    def on_shutdown(self) -> None:
        if self._checker is not None:
            self._checker.close()

    # -- running a check ----------------------------------------------------------------------------------
    def submit(self, uri: str, pairing: Pairing, priority: Priority, *, profile: bool, sanitize: bool) -> Job | None:
        server = self.server
        doc = server.document(uri)
        text = doc.source if doc is not None else Path(pairing.cu_path).read_text()
        request = CheckRequest(pairing=pairing, cu_source=text, profile=profile, sanitize=sanitize)
        checker = self.checker(pairing.cu_path)
        st = self.state(pairing.cu_path, pairing.kernel)
        st.reference = pairing.reference.path
        hit = checker.lookup(request)
        if hit is not None:
            self._finish(uri, pairing, hit)
            return None
        spec = JobSpec(
            key=f"check:{pairing.cu_path}:{pairing.kernel}:{hash(text)}:{profile}:{sanitize}",
            title=f"{'Profile' if profile else 'Verify'} {pairing.kernel}",
            run=lambda token, report: checker.run(request, token, report),
            priority=priority,
            document_uri=uri,
            gpu=True,
            gpu_index=server.settings.gpu_index,
            timeout_s=checker.timeout_s(request),
            supersedes=f"check:{pairing.cu_path}:{pairing.kernel}",
        )
        job = self.queue.submit(spec)
        st.job, st.profile, st.message = job, profile, ""
        job.future.add_done_callback(lambda f, job=job: server.call_soon(lambda: self._job_done(uri, pairing, job)))
        return job

    def _job_done(self, uri: str, pairing: Pairing, job: Job) -> None:
        st = self.state(pairing.cu_path, pairing.kernel)
        if st.job is job:
            st.job = None
        try:
            result: CheckResult = job.result(0)
        except JobTimedOut as exc:
            st.message = f"{job.title} {exc}"
            self.server.show_message(f"Stitch: {st.message}.", lsp.MessageType.Warning)
            st.verdict = Verdict(status=VerdictStatus.TIMEOUT, summary=f"stopped: {exc}")
            st.cached, st.when = False, time.time()
        except JobCancelled as exc:
            st.message = f"cancelled: {exc}"
        except Exception as exc:  # the machinery failed: say so, keep the server
            log.exception("check of %s failed", pairing.kernel)
            st.message = f"failed: {exc}"
            self.server.show_message(f"Stitch could not verify {pairing.kernel}: {exc}", lsp.MessageType.Error)
        else:
            self._finish(uri, pairing, result)
            return
        self.refresh(uri)

    def _finish(self, uri: str, pairing: Pairing, result: CheckResult) -> None:
        st = self.state(pairing.cu_path, pairing.kernel)
        st.verdict, st.cached, st.when, st.message = result.verdict, result.cached, time.time(), ""
        st.reference = pairing.reference.path
        self.last = LastVerdict(pairing.kernel, pairing.cu_path, pairing.reference.path, result.verdict)
        if result.verdict.status is VerdictStatus.NO_GPU:
            self.server.show_message_once("no-gpu", f"Stitch: {result.verdict.summary}", lsp.MessageType.Warning)
        self.refresh(uri)

    def record(self, uri: str, kernel: str, verdict: Verdict, *, reference: str = "") -> None:
        """Show a verdict obtained elsewhere (e.g. a fuse job) on ``kernel`` in ``uri``:
        hints, the hover card and ``stitch.showReport`` pick it up. Call on the server's loop."""
        path = self.server.path_of(uri)
        st = self.state(path, kernel)
        st.verdict, st.cached, st.when, st.message, st.reference = verdict, False, time.time(), "", reference
        self.last = LastVerdict(kernel, path, reference, verdict)
        if uri not in self.pairings:
            self.pair(uri)
        self.refresh(uri)

    # -- presenting ---------------------------------------------------------------------------------------
    def refresh(self, uri: str) -> None:
        """Rebuild this document's verdict hints and diagnostics from what is known."""
        server = self.server
        doc = server.document(uri)
        result = self.pairings.get(uri)
        if doc is None or result is None:
            return
        path = server.path_of(uri)
        lines = doc.lines
        hints: list[Hint] = []
        findings: list[Finding] = []
        for pairing in result.pairs:
            pos = _end_of_line(pairing.kernel_range.start.line, lines)
            st = self.kernels.get((pairing.cu_path, pairing.kernel))
            if not server.trusted:
                hints.append(status_hint(path, pos, UNTRUSTED, UNTRUSTED_TIP))
                continue
            if st is not None and st.job is not None and not st.job.done:
                what = "profiling" if st.profile else "verifying"
                hints.append(status_hint(path, pos, f"⏳ {what}…", f"{st.job.title}: cancel it from the progress notification or with **Stitch: Cancel All Jobs**."))
            if st is not None and st.verdict is not None:
                hints.extend(verdict_hints(path, pos, pairing.kernel, st.verdict, cached=st.cached))
                findings.extend(verdict_findings(path, pairing, st.verdict, lines))
            elif st is not None and st.message and (st.job is None or st.job.done):
                hints.append(status_hint(path, pos, NO_GPU if st.message == NO_GPU_TIP else "not verified", st.message))
            elif st is None or (st.job is None and st.verdict is None):
                if not server.settings.on_save.verify:
                    hints.append(status_hint(path, pos, "paired: verify on save is off", f"Run **Stitch: Verify Kernel** (`{VERIFY_COMMAND}`) or set `stitch.onSave.verify`."))
        # Kernels with a verdict from elsewhere (a fuse job's generated kernel) get their hints too.
        paired = {p.kernel for p in result.pairs} | set(result.broken)
        analysis = server.cuda.get(uri)
        for k in analysis.kernels if analysis is not None else ():
            st = self.kernels.get((path, k.name))
            if k.name in paired or st is None or st.verdict is None:
                continue
            hints.extend(verdict_hints(path, _end_of_line(k.name_range.start.line, lines), k.name, st.verdict, cached=st.cached))
        for name, why in result.broken.items():
            kernel_line = _kernel_line(self.server, uri, name)
            if kernel_line is not None:
                hints.append(status_hint(path, _end_of_line(kernel_line, lines), "not verified: pairing problem", why))
        self._show(uri, VERIFY_SOURCE, hints, server.hints)
        self._show(uri, VERIFY_SOURCE, findings, server.diagnostics)

    def pairing_at(self, uri: str, position: Position, name: str | None = None) -> tuple[Pairing | None, str, str]:
        """(pairing, kernel name, problem) for the kernel whose name or launch is at ``position``."""
        if name is None:
            name = kernel_name_at(self.server, uri, position)
        if name is None:
            return None, "", ""
        result = self.pairings.get(uri) or self.pair(uri)
        if result is None:
            return None, name, ""
        for p in result.pairs:
            if p.kernel == name:
                return p, name, ""
        return None, name, result.broken.get(name, "")


def kernel_name_at(server: StitchServer, uri: str, position: Position) -> str | None:
    """The kernel whose name (definition) or launch site is at ``position``.

    Plain int comparisons: a hover in a file of a thousand kernels must stay cheap."""
    analysis = server.cuda.get(uri)
    if analysis is None:
        return None
    line, char = position.line, position.character
    for k in analysis.kernels:
        r = k.name_range
        if r.start.line == line and r.start.character <= char <= r.end.character:
            return k.name
    for launch in analysis.launches:
        r = launch.range
        if r.start.line <= line <= r.end.line and _within(r, line, char):
            return launch.kernel.split("::")[-1].split("<")[0]
    return None


def _within(r: Range, line: int, char: int) -> bool:
    if line == r.start.line and char < r.start.character:
        return False
    if line == r.end.line and char > r.end.character:
        return False
    return True


def _kernel_line(server: StitchServer, uri: str, name: str) -> int | None:
    analysis = server.cuda.get(uri)
    if analysis is None:
        return None
    for k in analysis.kernels:
        if k.name == name:
            return k.name_range.start.line
    return None


def _end_of_line(line: int, lines: list[str]) -> Position:
    text = lines[line].rstrip("\r\n").rstrip() if line < len(lines) else ""
    return Position(line, len(text))


def verdict_findings(path: str, pairing: Pairing, verdict: Verdict, lines: list[str]) -> list[Finding]:
    """Diagnostics from a verdict: where a user fixes them."""
    at_kernel = pairing.kernel_range
    out: list[Finding] = []

    def add(rng: Range, severity: Severity, code: str, message: str, related: tuple[str, ...] = ()) -> None:
        out.append(Finding(path=path, range=rng, severity=severity, code=code, message=message, source="stitch verify", related=related))

    s = verdict.status
    k = pairing.kernel
    if s is VerdictStatus.INCORRECT:
        failed = verdict.correctness.failed_trials
        related = tuple(
            f"{t.name} ({t.kind}): " + ", ".join(
                x for x in (
                    f"max abs err {t.max_abs_err:.3g}" if t.max_abs_err is not None else "",
                    f"max rel err {t.max_rel_err:.3g}" if t.max_rel_err is not None else "",
                    f"{t.mismatches} elements differ" if t.mismatches else "",
                    t.detail,
                ) if x
            )
            for t in failed[:8]
        )
        add(at_kernel, Severity.ERROR, "STITCH-WRONG", f"`{k}` disagrees with the reference: {len(failed)} of {len(verdict.correctness.trials)} checks failed", related)
    elif s is VerdictStatus.BAD_INPUT:
        add(pairing.anchor, Severity.ERROR, "STITCH-BAD-INPUT", verdict.summary or "the reference or the launch is not usable")
    elif s is VerdictStatus.COMPILE_ERROR:
        diagnostics = verdict.compile.diagnostics if verdict.compile else []
        here = [f for f in diagnostics if Path(f.path).name == Path(pairing.cu_path).name and f.range.start.line < len(lines)]
        for f in here[:10]:
            add(f.range, f.severity, "STITCH-COMPILE", f"does not compile for verification: {f.message}")
        if not here:
            first = diagnostics[0].message if diagnostics else verdict.summary
            add(at_kernel, Severity.ERROR, "STITCH-COMPILE", f"`{k}` does not compile for verification: {first}")
    elif s in (VerdictStatus.CRASHED, VerdictStatus.OUT_OF_MEMORY, VerdictStatus.TOO_LARGE, VerdictStatus.TIMEOUT,
               VerdictStatus.ERROR, VerdictStatus.UNVERIFIABLE):
        add(at_kernel, Severity.WARNING, f"STITCH-{s.value.upper().replace('_', '-')}", verdict.summary or s.value, tuple(verdict.events[-3:]))
    for flag in verdict.hack_flags:
        add(at_kernel, Severity.ERROR, flag.code, f"anti-hacking: {flag.message}", (flag.evidence,) if flag.evidence else ())
    # Asked for, got that far, not done (a tool missing, a failed run): say why where the user looks.
    ran = s in (VerdictStatus.CORRECT, VerdictStatus.INCORRECT, VerdictStatus.HACKING)
    if ran and verdict.profile.status in ("skipped", "error") and verdict.profile.message:
        add(at_kernel, Severity.INFO, "STITCH-NO-PROFILE", f"`{k}` not profiled: {verdict.profile.message}")
    if ran and verdict.sanitizer.status in ("skipped", "error") and verdict.sanitizer.message:
        add(at_kernel, Severity.INFO, "STITCH-NO-SANITIZER",
            f"`{k}` not sanitized: {verdict.sanitizer.message}")
    cu_name = Path(pairing.cu_path).name
    for f in verdict.sanitizer.findings:
        if f.line is not None and (not f.file or Path(f.file).name == cu_name) and f.line < len(lines):
            rng = Range.line_span(f.line, 0, len(lines[f.line].rstrip("\r\n")))
        else:
            rng = at_kernel
        add(rng, Severity.ERROR, f"sanitizer-{f.tool}", f"{f.kind}: {f.message}" if f.message else f.kind)
    for score in verdict.rubric:
        if score.score <= 2:
            add(at_kernel, Severity.WARNING, f"rubric-{score.dimension}", f"rubric {score.dimension.replace('_', ' ')}: {score.score}/5", tuple(score.reasons))
    return out


def kernel_checks(server: StitchServer) -> KernelChecks:
    checks = getattr(server, "_stitch_kernel_checks", None)
    if checks is None:
        checks = KernelChecks(server)
        server._stitch_kernel_checks = checks  # type: ignore[attr-defined]
    return checks


def register(server: StitchServer) -> None:
    checks = kernel_checks(server)
    server.on_analysis(checks.on_analysis)
    server.on_save(checks.on_save)
    server.on_close(checks.on_close)
    server.on_settings_changed(checks.on_settings_changed)
    server.on_shutdown(checks.on_shutdown)

    async def run_command(ls: StitchServer, args: Any, profile: bool) -> dict[str, Any]:
        uri, position = _uri_position(ls, args)
        if uri is None:
            return {"ok": False, "message": "expected [uri, position] of a kernel"}
        await ls.cuda.current(uri)
        pairing, name, problem = checks.pairing_at(uri, position)
        if name == "":
            return {"ok": False, "message": "no kernel under the cursor: put it on a __global__ kernel's name or a launch"}
        if pairing is None:
            message = problem or f"`{name}` is not paired with a reference: add `// stitch: reference=path/to/ref.py` above it"
            ls.show_message(f"Stitch: {message}", lsp.MessageType.Warning)
            return {"ok": False, "kernel": name, "message": message}
        if not ls.trusted:
            ls.show_message(f"Stitch: {UNTRUSTED}. {UNTRUSTED_TIP}", lsp.MessageType.Warning)
            return {"ok": False, "kernel": name, "message": UNTRUSTED}
        if await checks.gpu_absent():
            checks.tell_no_gpu([pairing], asked=True)
            checks.refresh(uri)
            return {"ok": False, "kernel": name, "message": NO_GPU_TIP}
        job = checks.submit(uri, pairing, Priority.USER, profile=profile, sanitize=ls.settings.on_save.sanitize)
        checks.refresh(uri)
        st = checks.state(pairing.cu_path, name)
        return {
            "ok": True,
            "kernel": name,
            "jobId": job.id if job is not None else None,
            "cached": job is None,
            "summary": st.verdict.summary if job is None and st.verdict else "",
            "badge": badge(st.verdict) if job is None and st.verdict else "",
        }

    @server.command(VERIFY_COMMAND)
    async def verify_kernel(ls: StitchServer, *args: Any) -> dict[str, Any]:
        return await run_command(ls, args, profile=False)

    @server.command(PROFILE_COMMAND)
    async def profile_kernel(ls: StitchServer, *args: Any) -> dict[str, Any]:
        return await run_command(ls, args, profile=True)


def _uri_position(ls: StitchServer, args: Any) -> tuple[str | None, Position]:
    """Commands get ``[uri, {line, character}]`` (client encoding)."""
    flat = list(args)
    if len(flat) == 1 and isinstance(flat[0], (list, tuple)):
        flat = list(flat[0])
    if not flat or not isinstance(flat[0], str):
        return None, Position(0, 0)
    uri = flat[0]
    pos = flat[1] if len(flat) > 1 else None
    line = _field(pos, "line")
    char = _field(pos, "character")
    if line is None or char is None:
        return uri, Position(0, 0)
    return uri, ls.converter(uri).from_position(lsp.Position(line=int(line), character=int(char)))


def _field(obj: Any, name: str) -> Any:
    if obj is None:
        return None
    if isinstance(obj, dict):
        return obj.get(name)
    return getattr(obj, name, None)
