"""ptxas' verbose report (``-Xptxas -v``, or NVRTC's ``--ptxas-options=-v`` log).

Gives per-kernel registers, shared memory, stack and spills as ``KernelResources``
and ptxas' own errors and warnings with the (mangled) function they name. Mangled
names are demangled with ``c++filt`` (a small built-in fallback handles plain and
namespaced names where it is missing) and matched back to the kernels the CUDA
analysis found, overloads included.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from functools import lru_cache
from typing import Any, Iterable, Sequence

from attrs import define, field, frozen

from stitch_lsp.child_env import tool_env
from stitch_lsp.findings import Severity
from stitch_lsp.verdict import KernelResources

_PREFIX = r"^\s*(?:ptxas\s+)?"
_INFO = re.compile(_PREFIX + r"info\s*:\s*(?P<rest>.*)$")
_DIAG = re.compile(_PREFIX + r"(?P<sev>error|fatal|warning)\s*:\s*(?P<rest>.*)$")
_ENTRY = re.compile(r"Compiling entry function '(?P<name>[^']+)'(?: for '(?P<arch>[^']+)')?")
_PROPS = re.compile(r"Function properties for (?P<name>\S+)")
_FRAME = re.compile(
    r"(?P<stack>\d+) bytes stack frame, (?P<stores>\d+) bytes spill stores, (?P<loads>\d+) bytes spill loads"
)
_USED = re.compile(r"Used (?P<regs>\d+) registers")
_SMEM = re.compile(r"(?P<n>\d+) bytes smem")
_CMEM = re.compile(r"(?P<n>\d+) bytes cmem\[\d+\]")
_CUMULATIVE_STACK = re.compile(r"(?P<n>\d+) bytes cumulative stack size")
_QUOTED = re.compile(r"'(?P<name>[^']+)'")


@frozen
class PtxasMessage:
    severity: Severity
    message: str
    function: str = ""  # the mangled name the message is about, where it names one


@define
class PtxasReport:
    kernels: list[KernelResources] = field(factory=list)
    messages: list[PtxasMessage] = field(factory=list)
    arch: str = ""
    demangled: dict[str, str] = field(factory=dict)  # mangled -> full demangled signature

    @property
    def errors(self) -> list[PtxasMessage]:
        return [m for m in self.messages if m.severity is Severity.ERROR]


def parse_ptxas(text: str) -> PtxasReport:
    """Parse every ptxas line in ``text`` (other lines are ignored)."""
    report = PtxasReport()
    entries: dict[str, KernelResources] = {}
    frames: dict[str, tuple[int, int, int]] = {}
    current: str | None = None
    props_for: str | None = None
    for raw in text.replace("\r\n", "\n").split("\n"):
        frame = _FRAME.search(raw)
        if frame and props_for is not None:
            frames[props_for] = (int(frame["stack"]), int(frame["stores"]), int(frame["loads"]))
            props_for = None
            continue
        diag = _DIAG.match(raw)
        if diag:
            sev = Severity.WARNING if diag["sev"] == "warning" else Severity.ERROR
            rest = diag["rest"].strip()
            quoted = _QUOTED.search(rest)
            report.messages.append(PtxasMessage(sev, rest, quoted["name"] if quoted else ""))
            continue
        info = _INFO.match(raw)
        if not info:
            continue
        rest = info["rest"]
        entry = _ENTRY.search(rest)
        if entry:
            current = entry["name"]
            report.arch = entry["arch"] or report.arch
            entries.setdefault(current, KernelResources(name=current, mangled=current))
            continue
        props = _PROPS.search(rest)
        if props:
            props_for = props["name"]
            continue
        used = _USED.search(rest)
        if used and current is not None:
            k = entries[current]
            k.registers = int(used["regs"])
            if m := _SMEM.search(rest):
                k.shared_bytes = int(m["n"])
            if m := _CMEM.search(rest):
                k.constant_bytes = int(m["n"])
            if m := _CUMULATIVE_STACK.search(rest):
                k.stack_bytes = max(k.stack_bytes, int(m["n"]))
    for name, k in entries.items():
        if name in frames:
            stack, stores, loads = frames[name]
            k.stack_bytes = max(k.stack_bytes, stack)
            k.spill_stores, k.spill_loads = stores, loads
    names = demangle_all(list(entries) + [m.function for m in report.messages if m.function])
    report.demangled = names
    for mangled, k in entries.items():
        k.name = base_name(names.get(mangled, mangled))
    report.kernels = list(entries.values())
    return report


# -- demangling -------------------------------------------------------------------------
@lru_cache(maxsize=1)
def _cxxfilt() -> str | None:
    return shutil.which("c++filt") or shutil.which("cu++filt")


def demangle_all(names: Sequence[str]) -> dict[str, str]:
    """Mangled -> demangled for every name (names that are not mangled map to themselves)."""
    mangled = [n for n in names if n.startswith("_Z")]
    out = {n: n for n in names}
    if not mangled:
        return out
    tool = _cxxfilt()
    if tool:
        try:
            proc = subprocess.run(
                [tool], input="\n".join(mangled) + "\n", capture_output=True, text=True, timeout=10,
                env=tool_env(),
            )
            lines = proc.stdout.splitlines()
            if proc.returncode == 0 and len(lines) == len(mangled):
                out.update(zip(mangled, lines))
                return out
        except (OSError, subprocess.SubprocessError):
            pass
    for n in mangled:
        out[n] = _fallback_demangle(n)
    return out


def _fallback_demangle(name: str) -> str:
    """Enough of the Itanium scheme for ``_Z<len><name>`` and ``_ZN<len><ns>...E`` prefixes."""
    rest = name[2:]
    parts: list[str] = []
    nested = rest.startswith("N")
    if nested:
        rest = rest[1:]
    while rest and rest[0].isdigit():
        m = re.match(r"(\d+)", rest)
        n = int(m.group(1))
        rest = rest[len(m.group(1)) :]
        parts.append(rest[:n])
        rest = rest[n:]
        if not nested:
            break
    return "::".join(parts) + "(...)" if parts else name


def _strip_brackets(text: str, open_: str, close: str) -> str:
    out, depth = [], 0
    for ch in text:
        if ch == open_:
            depth += 1
        elif ch == close:
            depth -= 1
        elif depth == 0:
            out.append(ch)
    return "".join(out)


def split_signature(demangled: str) -> tuple[str, list[str]]:
    """``void ns::k<256>(float const*, int)`` -> (``ns::k``, [``float const*``, ``int``])."""
    text = demangled.strip()
    params: list[str] = []
    if text.endswith(")"):
        depth = 0
        for idx in range(len(text) - 1, -1, -1):
            if text[idx] == ")":
                depth += 1
            elif text[idx] == "(":
                depth -= 1
                if depth == 0:
                    inner = text[idx + 1 : -1]
                    text = text[:idx]
                    params = _split_top(inner)
                    break
    text = _strip_brackets(text, "<", ">").strip()
    # A template's return type comes first ("void k<256>(...)"): the name is the last word.
    name = text.split()[-1] if text.split() else text
    return name, [p for p in params if p and p != "void"]


def _split_top(inner: str) -> list[str]:
    parts, depth, cur = [], 0, []
    for ch in inner:
        if ch in "<(":
            depth += 1
        elif ch in ">)":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(cur).strip())
            cur = []
        else:
            cur.append(ch)
    if "".join(cur).strip():
        parts.append("".join(cur).strip())
    return parts


def base_name(demangled: str) -> str:
    """The name as written at the definition: ``ops::add(...)`` -> ``add``."""
    name, _ = split_signature(demangled)
    return name.split("::")[-1]


def qualified_name(demangled: str) -> str:
    return split_signature(demangled)[0]


# -- matching back to source ---------------------------------------------------------------
_TYPE_WORDS = re.compile(r"\b(?:unsigned|signed|char|short|int|long|float|double|half|__half|__nv_bfloat16|bool|size_t|\w+_t|float\d|int\d|uint\d|double\d)\b")


def _type_signature(param_text: str) -> tuple[str, int]:
    """Base type words and pointer depth of one parameter (name dropped)."""
    words = _TYPE_WORDS.findall(param_text)
    return " ".join(words), param_text.count("*")


def _param_text(param: Any) -> str:
    if isinstance(param, str):
        return param
    for attr in ("type_text", "type", "text", "declaration"):
        value = getattr(param, attr, None)
        if isinstance(value, str):
            return value
    return str(param)


def match_kernel(demangled: str, kernels: Iterable[Any]) -> Any | None:
    """The KernelInfo that ``demangled`` names: by name, then parameter count and types."""
    name, params = split_signature(demangled)
    short = name.split("::")[-1]
    candidates = [k for k in kernels if getattr(k, "name", None) == short]
    if len(candidates) <= 1:
        return candidates[0] if candidates else None
    wanted = [_type_signature(p) for p in params]

    def score(k: Any) -> tuple[int, int]:
        given = [_type_signature(_param_text(p)) for p in (getattr(k, "params", None) or ())]
        same_count = int(len(given) == len(wanted))
        same_types = sum(1 for a, b in zip(given, wanted) if a == b)
        return same_count, same_types

    return max(candidates, key=score)
