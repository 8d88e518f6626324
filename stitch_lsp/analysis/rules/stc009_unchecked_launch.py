"""STC009: a kernel launch with no error check after it."""

from __future__ import annotations

from stitch_lsp.analysis.cuda_facts import Call, FunctionFacts
from stitch_lsp.analysis.rules.base import Emitter, Rule, RuleMeta
from stitch_lsp.findings import Fix, Severity

_ERROR_QUERIES = frozenset({"cudaGetLastError", "cudaPeekAtLastError"})


def _is_check(call: Call) -> bool:
    name = call.name.split("::")[-1]
    if name in _ERROR_QUERIES:
        return True
    low = name.lower()
    if "check" in low or "assert" in low:
        return True
    # A CUDA API call whose status is looked at (assigned, compared, returned).
    return name.startswith("cuda") and not call.bare


def _check_line(facts: FunctionFacts, kernel: str) -> str:
    consts = facts.consts
    macro = next((m for m in consts.function_macros if "CHECK" in m.upper() and "CUDA" in m.upper()), None)
    if macro is not None:
        return f"{macro}(cudaGetLastError());"
    if any(i.startswith(("torch/", "c10/", "ATen/")) for i in consts.includes):
        return "C10_CUDA_KERNEL_LAUNCH_CHECK();"
    return ('if (cudaError_t err = cudaGetLastError(); err != cudaSuccess) '
            f'{{ fprintf(stderr, "{kernel} launch failed: %s\\n", cudaGetErrorString(err)); }}')


class UncheckedLaunch(Rule):
    meta = RuleMeta("STC009", "unchecked-launch", "Kernel launch with no error check after it", Severity.WARNING)

    def check(self, facts: FunctionFacts, out: Emitter) -> None:
        if not facts.launches or facts.body is None:
            return
        # cudaGetLastError() reports the last launch error until it is read, so one check
        # after a group of launches covers all of them.
        checks = [c.node.start_byte for c in facts.calls if _is_check(c)]
        last_check = max(checks, default=-1)
        for launch in sorted(facts.launches, key=lambda l: l.node.start_byte):
            if last_check >= launch.node.end_byte:
                continue
            fix = None
            if launch.stmt is not None:
                line_start = facts.src.rfind(b"\n", 0, launch.stmt.start_byte) + 1
                indent = facts.src[line_start:launch.stmt.start_byte].decode("utf-8", "replace")
                indent = indent if not indent.strip() else ""
                line = _check_line(facts, launch.info.kernel)
                fix = Fix(title="Check the launch with cudaGetLastError()",
                          edits=(out.insert_after(launch.stmt, "\n" + indent + line),))
            out.emit(launch.node, f"launch of `{launch.info.kernel}` is never checked; a bad configuration or "
                                  f"a missing kernel image fails silently. Check `cudaGetLastError()` after it",
                     fix=fix)


RULE = UncheckedLaunch()
