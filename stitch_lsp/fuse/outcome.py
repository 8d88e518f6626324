"""What a fuse run gives back (``FuseOutcome``) and where its files lie: the task's folder under
``.stitch/tasks/``, each candidate kept there for reading."""

from __future__ import annotations

import json
from pathlib import Path

from attrs import define, field

from stitch_lsp.findings import Finding
from stitch_lsp.pipeline import Candidate, Plan, Task
from stitch_lsp.serde import to_dict, to_json
from stitch_lsp.verdict import Verdict


@define
class FuseOutcome:
    task: Task
    plan: Plan | None = None
    candidate: Candidate | None = None
    verdict: Verdict | None = None
    message: str = ""  # one line for the user: what happened, speedups or why not
    # Relative path (under the workspace) -> text: the kernel module and the loader. Empty unless offerable.
    edit_files: dict[str, str] = field(factory=dict)
    # Where the generated files were kept for reading (``.stitch/tasks/<hash>/``).
    task_dir: str = ""
    plan_text: str = ""
    # Rubric findings and hack flags, placed on the generated files under ``task_dir``.
    findings: list[Finding] = field(factory=list)
    # GEMM-family kernels whose tile is the table's, not measured here: a tuning run would measure them.
    untuned_gemms: int = 0
    # Why the GEMM family's candidate was not the one offered (``auto`` mode: it failed the Verifier, and
    # the candidate with the GEMM left to cuBLAS was generated and judged too). Empty: no fallback ran.
    gemm_fallback: str = ""
    # The GEMM family's candidate passed but ran slower than eager, and without it nothing is left to
    # fuse: nothing is offered (a kernel slower than the code it replaces is no win).
    slower_than_library: bool = False
    channels_last: bool | None = None  # False: the candidate has every convolution in NCHW (the layout fallback)
    layout_fallback: str = ""  # set when a convolution's channels-last candidate was tried again in NCHW: what happened
    # The GEMM family's own verdict, when the fallback's candidate is the one above.
    family_verdict: Verdict | None = None
    # False: hand-written attention kept as written (the attention fallback); "library": attention calls left to
    # PyTorch's fused attention, the kernel of our own being slower or refused (the attention kernel fallback).
    attention: bool | str = True
    attention_fallback: str = ""  # set when an attention fallback ran: what it tried and why

    @property
    def offerable(self) -> bool:
        return bool(self.verdict and self.verdict.offerable and self.edit_files)


def task_dir_for(task: Task, root: Path) -> Path:
    return root / ".stitch" / "tasks" / task.key()


def keep(folder: Path, candidate: Candidate, verdict: Verdict | None = None) -> None:
    """The candidate's files (and its verdict) under ``folder``, for reading."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "candidate.py").write_text(candidate.module_source, encoding="utf-8")
    for name, text in candidate.cuda_sources.items():
        (folder / name).write_text(text, encoding="utf-8")
    (folder / "candidate.json").write_text(to_json(candidate, indent=1), encoding="utf-8")
    if verdict is not None:
        (folder / "verdict.json").write_text(to_json(verdict, indent=1), encoding="utf-8")


def outcome_json(outcome: FuseOutcome) -> str:
    data = to_dict(outcome)
    if data.get("plan"):
        data["plan"].pop("graph", None)  # large; it is in plan.json under the task directory
    return json.dumps(data, indent=1, sort_keys=True)

