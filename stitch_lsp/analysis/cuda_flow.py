"""What a host function does about kernel launch errors: its launches, its error checks
and the functions it calls, in source order (``FunctionFlow``). STC009 follows these
across the functions of a file, so a launch helper whose callers check is not blamed.

A check is recognised by what it is: ``cudaGetLastError`` / ``cudaPeekAtLastError``, a
CUDA call whose status is used (``err = cudaDeviceSynchronize()``), a function of the
same file that itself checks (whatever its name), or a function or macro from elsewhere
named for checking errors (``checkCudaErrors``, ``getLastCudaError``, ``HANDLE_ERROR``,
``gpuErrchk``, ``CUDA_SAFE_CALL``).
"""

from __future__ import annotations

from stitch_lsp.analysis.cuda_consts import Constants
from stitch_lsp.analysis.cuda_facts import Call, FunctionFacts
from stitch_lsp.analysis.cuda_model import FlowStep, FunctionFlow
from stitch_lsp.analysis.cuda_text import operands
from stitch_lsp.findings import Fix, Position, Range, TextEdit

_ERROR_QUERIES = frozenset({"cudaGetLastError", "cudaPeekAtLastError"})
_NOT_CHECKS = frozenset({"cudageterrorstring", "cudageterrorname", "perror", "strerror"})
_CHECK_WORDS = ("check", "assert", "err", "safe")
_TORCH = ("torch/", "c10/", "ATen/", "pybind11/")


def check_kind(call: Call) -> str | None:
    """"api" for a call that surely reads the launch status, "named" for one whose name says
    it checks errors (a function of the same file is judged by its body instead), else None."""
    name = call.name.split("::")[-1]
    if name in _ERROR_QUERIES:
        return "api"
    if name.startswith("cuda") and not call.bare and name.lower() not in _NOT_CHECKS:
        return "api"
    low = name.lower()
    if low not in _NOT_CHECKS and any(w in low for w in _CHECK_WORDS):
        return "named"
    return None


def is_torch_extension(includes: tuple[str, ...]) -> bool:
    """Host functions of a PyTorch extension are called from Python, which cannot check."""
    return any(i.startswith(_TORCH) for i in includes)


def check_statement(consts: Constants, kernel: str) -> tuple[str, str | None]:
    """A launch check in the file's own terms, and the header it needs (None: none)."""
    macro = next((m for m in consts.function_macros
                  if "cuda" in m.lower() and ("check" in m.lower() or "err" in m.lower())), None)
    if macro is not None:
        return f"{macro}(cudaGetLastError());", None
    if any(i.endswith("helper_cuda.h") for i in consts.includes):
        return f'getLastCudaError("{kernel} launch failed");', None
    if is_torch_extension(consts.includes):
        return "C10_CUDA_KERNEL_LAUNCH_CHECK();", "c10/cuda/CUDAException.h"
    return ('if (cudaError_t err = cudaGetLastError(); err != cudaSuccess) '
            f'{{ fprintf(stderr, "{kernel} launch failed: %s\\n", cudaGetErrorString(err)); }}'), "cstdio"


def include_edit(includes: tuple[str, ...], header: str | None) -> TextEdit | None:
    """`#include <header>` at the top of the file, unless it (or its C form) is there."""
    if header is None:
        return None
    alike = {header, "stdio.h"} if header == "cstdio" else {header, "ATen/cuda/CUDAContext.h"}
    if any(i in alike for i in includes):
        return None
    at = Position(0, 0)
    return TextEdit(Range(at, at), f"#include <{header}>\n")


def function_flow(facts: FunctionFacts) -> FunctionFlow | None:
    """The flow of a host function that launches kernels or calls functions, else None."""
    if not facts.is_host_code or facts.body is None:
        return None
    steps: list[tuple[int, FlowStep]] = []
    for launch in facts.launches:
        kernel = launch.info.kernel.split("::")[-1]
        fix, header = None, None
        if launch.stmt is not None:
            src = facts.src
            line_start = src.rfind(b"\n", 0, launch.stmt.start_byte) + 1
            indent = src[line_start:launch.stmt.start_byte].decode("utf-8", "replace")
            indent = indent if not indent.strip() else ""
            line, header = check_statement(facts.consts, kernel)
            end = facts.cols.end(launch.stmt)
            fix = Fix(title="Check the launch with cudaGetLastError()",
                      edits=(TextEdit(Range(end, end), "\n" + indent + line),))
        steps.append((launch.node.start_byte, FlowStep("launch", kernel, launch.info.range, fix, header)))
        args = launch.node.child_by_field_name("arguments")
        for a in operands(args) if args is not None else ():
            _ref(facts, a, steps)
    launched = {l.node.id for l in facts.launches}
    for c in facts.calls:
        if c.node.id in launched:
            continue
        kind = check_kind(c)
        if kind is not None:
            # A check covers what runs inside its own arguments: `CHECK(run(x))`.
            steps.append((c.node.end_byte, FlowStep("check", "" if kind == "api" else c.name.split("::")[-1])))
        else:
            steps.append((c.node.start_byte, FlowStep("call", c.name.split("::")[-1])))
        for a in c.args:
            _ref(facts, a, steps)
    if not steps:
        return None
    type_node = facts.node.child_by_field_name("type")
    returns_status = type_node is not None and "cudaError" in facts.text(type_node)
    steps.sort(key=lambda s: s[0])
    return FunctionFlow(facts.name.split("::")[-1], True, returns_status, tuple(s for _, s in steps))


def _ref(facts: FunctionFacts, arg, steps: list[tuple[int, FlowStep]]) -> None:
    """A name passed as a value (`run(launch_softmax)`, `&helper`): it may be called elsewhere."""
    if arg.type == "pointer_expression" and operands(arg):
        arg = operands(arg)[-1]
    if arg.type in ("identifier", "qualified_identifier"):
        steps.append((arg.start_byte, FlowStep("ref", facts.text(arg).split("::")[-1])))
