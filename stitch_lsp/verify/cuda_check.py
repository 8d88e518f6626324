"""Everything the editor shows for one CUDA file, computed headless: static rules,
nvcc diagnostics and per-kernel resources. ``stitch check`` prints it."""

from __future__ import annotations

from pathlib import Path

from attrs import define, field

from stitch_lsp.findings import Finding, Hint, Range, Severity
from stitch_lsp.settings import Settings
from stitch_lsp.verdict import KernelResources
from stitch_lsp.verify.nvcc import NvccOutcome, compile_cuda
from stitch_lsp.verify.nvcc_check import check_from_outcome

# A binary file opened by mistake is not analysed; see stitch_lsp.lsp.cuda_documents.
MAX_CHARS = 16_000_000


@define
class FileCheck:
    path: str
    findings: list[Finding] = field(factory=list)
    kernels: list[KernelResources] = field(factory=list)
    hints: list[Hint] = field(factory=list)
    compile_status: str = "skipped"  # ok | failed | missing | timeout | no_space | error | skipped
    compile_message: str = ""
    arch: str = ""
    compile_seconds: float = 0.0
    skipped: str = ""  # why the file was not checked at all ("binary file", ...)
    notes: list[str] = field(factory=list)

    @property
    def errors(self) -> int:
        return sum(1 for f in self.findings if f.severity is Severity.ERROR)


def parse_notice(path: str, syntax_errors: tuple[Range, ...]) -> list[Finding]:
    """One quiet note where the parse broke (the rules skip only what their own hints name)."""
    if not syntax_errors:
        return []
    first = min(syntax_errors, key=lambda r: (r.start.line, r.start.character))
    return [
        Finding(
            path=path,
            range=first,
            severity=Severity.HINT,
            code="parse",
            message=("tree-sitter's CUDA grammar cannot read some code here; it may well be valid (nvcc reports "
                     "any real error on save). The static rules skip only the statements their hints name."),
            source="stitch",
        )
    ]


def read_source(path: Path) -> tuple[str | None, str]:
    """The file's text and a note (non-UTF-8 bytes), or None and why it is skipped."""
    data = path.read_bytes()
    if b"\x00" in data:
        return None, "binary file"
    if len(data) > MAX_CHARS * 4:
        return None, "larger than the analysis limit"
    try:
        return data.decode("utf-8"), ""
    except UnicodeDecodeError as exc:
        return data.decode("utf-8", "replace"), f"not valid UTF-8 (byte {exc.start}); undecodable bytes were replaced"


# A terminal waits longer than an editor, but no text may stall it (analysis.budget).
CLI_ANALYSIS_BUDGET_S = 30.0


def check_file(path: Path, settings: Settings, *, compile: bool = True, root: Path | None = None) -> FileCheck:
    from stitch_lsp.analysis.cuda_analysis import analyze_cuda

    shown = str(path)
    result = FileCheck(path=shown)
    text, note = read_source(path)
    if text is None:
        result.skipped = note
        return result
    if note:
        result.notes.append(note)
    analysis = analyze_cuda(text, str(path.resolve()), budget_s=CLI_ANALYSIS_BUDGET_S)
    findings = [_at(f, shown) for f in analysis.findings]
    if not analysis.parse_ok:
        findings += parse_notice(shown, analysis.syntax_errors)
    if compile:
        outcome: NvccOutcome = compile_cuda(text, str(path.resolve()), settings, root=root)
        result.compile_status, result.compile_message, result.arch = outcome.status, outcome.message, outcome.arch
        result.compile_seconds = outcome.result.seconds
        if outcome.status in ("ok", "failed"):
            check = check_from_outcome(outcome, analysis, shown, text)
            findings += [_at(f, shown) for f in check.findings]
            result.kernels = sorted((p.resources for p in check.kernels), key=lambda k: k.line or 0)
            result.hints = check.hints
    result.findings = sorted(findings, key=lambda f: (f.range.start.line, f.range.start.character, f.code))
    return result


def _at(finding: Finding, path: str) -> Finding:
    if finding.path == path:
        return finding
    from attrs import evolve

    return evolve(finding, path=path)
