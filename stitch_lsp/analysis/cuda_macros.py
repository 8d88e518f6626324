"""The common macros of PyTorch, CUTLASS and CUB extensions, as the analysis models them.

The analysis never sees the headers that define these macros, and tree-sitter cannot
read some of their call shapes. Each kind is modelled so that what matters to the rules
survives, always in place (the same bytes, lines and columns: see ``cuda_preproc``):

* **Attributes** written as macros (``C10_LAUNCH_BOUNDS_1(256)``, ``CUTLASS_DEVICE``,
  ``C10_HOST_DEVICE``): rewritten to the CUDA keyword they expand to, padded with blanks,
  so the function is still seen as ``__global__`` / ``__device__`` with its launch bounds.
* **Instantiation and registration macros** at file scope, written without a ``;``
  (``INSTANTIATE_KERNEL(float)``, ``MAKE_kQuantize(half, 4096)``, ``TORCH_LIBRARY(...)``'s
  one-line forms): blanked, so the parser does not read the next definition as their
  continuation. Any file-scope call line of a macro this file defines, or whose name is
  written in capitals, is treated so; a name in ``ATTRIBUTES`` never is.
* **Dispatch macros** (``AT_DISPATCH_FLOATING_TYPES(t, "name", [&] { ... })``,
  ``DISPATCH_*``, ``BOOL_SWITCH``) take their body as a lambda, which tree-sitter reads:
  the body is analysed like any other code. A macro whose argument is a bare block
  (``MY_DISPATCH(t, T, { ... });``) is handled by ``cuda_repair``: the block stays.
* **Extended lambdas** (``[=] __device__ (int i) { ... }``): the execution space after the
  capture list is blanked, so the lambda is read like any other.
* **Launch checks** (``C10_CUDA_KERNEL_LAUNCH_CHECK()``, ``C10_CUDA_CHECK``,
  ``AT_CUDA_CHECK``, ``CUDA_CHECK``): checks of the launch status (``cuda_flow``), also
  when written without their ``;``.
"""

from __future__ import annotations

import re

# Macro -> what it expands to, as far as the analysis cares (never longer than the macro).
ATTRIBUTES: dict[bytes, bytes] = {
    b"CUTLASS_DEVICE": b"__device__",
    b"CUTLASS_HOST_DEVICE": b"__host__ __device__",
    b"CUTLASS_GLOBAL": b"__global__",
    b"CUTE_DEVICE": b"__device__",
    b"CUTE_HOST_DEVICE": b"__device__",
    b"C10_DEVICE": b"__device__",
    b"C10_HOST_DEVICE": b"__device__",
    b"C10_HOST": b"",
    b"CUB_RUNTIME_FUNCTION": b"",
    b"C10_ALWAYS_INLINE": b"",
    b"C10_LAUNCH_BOUNDS_0": b"",
}
# Attribute macros with arguments: name -> replacement of `NAME(` (the arguments and `)` stay).
ATTRIBUTE_CALLS: dict[bytes, bytes] = {
    b"C10_LAUNCH_BOUNDS_1": b"__launch_bounds__",
    b"C10_LAUNCH_BOUNDS_2": b"__launch_bounds__",
}
# Launch-status checks (cuda_flow recognises any name with "check" in it; listed for the docs).
LAUNCH_CHECKS = frozenset({"C10_CUDA_KERNEL_LAUNCH_CHECK", "C10_CUDA_CHECK", "AT_CUDA_CHECK", "CUDA_CHECK",
                           "CUDA_KERNEL_LAUNCH_CHECK", "CUTLASS_CHECK", "CUB_DEBUG"})
# Dispatch macros whose last argument is the body (read as a lambda by the parser).
DISPATCH_PREFIXES = ("AT_DISPATCH_", "DISPATCH_", "BOOL_SWITCH", "FP16_SWITCH", "FWD_HEADDIM_SWITCH",
                     "VLLM_DISPATCH_", "MOE_DISPATCH", "TORCH_DISPATCH")

_ATTRIBUTE_RE = re.compile(
    rb"\b(" + b"|".join(re.escape(k) for k in sorted(ATTRIBUTES, key=len, reverse=True)) + rb")\b"
    rb"|\b(" + b"|".join(re.escape(k) for k in ATTRIBUTE_CALLS) + rb")[ \t]*\(")
_HINTS = re.compile(rb"CUTLASS_|CUTE_|C10_|CUB_RUNTIME")
# A line that starts (column 0) with `NAME(` (a literal first byte: the search skips fast).
_TOP_CALL = re.compile(rb"\n([A-Za-z_]\w*)[ \t]*\(")
_DEFINED_FN = re.compile(rb"#[ \t]*define[ \t]+([A-Za-z_]\w*)\(")
_CAPITALS = re.compile(rb"[A-Z][A-Z0-9_]*[A-Z0-9]")
# What may follow an attribute macro on the next line (then the line is not an instantiation).
_DECL_START = re.compile(rb"[ \t]*(?:__global__|__device__|__host__|__forceinline__|static|inline|void|extern|"
                         rb"__launch_bounds__|[A-Za-z_]\w*[ \t]+[A-Za-z_]\w*[ \t]*\()")


# `[=] __device__ (int i) { ... }`: an extended lambda's execution space, which tree-sitter
# cannot read after the capture list (blanked: the body is read as an ordinary lambda).
_LAMBDA_SPACE = re.compile(rb"\][ \t]*((?:__host__[ \t]+)?__device__|__host__)\b")


def rewrite_attributes(src: bytes, out: bytearray) -> bool:
    """Attribute macros rewritten in ``out`` (same length); whether any was found."""
    found = False
    for m in _LAMBDA_SPACE.finditer(src):
        found = True
        out[m.start(1):m.end(1)] = b" " * (m.end(1) - m.start(1))
    if _HINTS.search(src) is None:
        return found
    for m in _ATTRIBUTE_RE.finditer(src):
        found = True
        if m.group(1) is not None:
            new = ATTRIBUTES[m.group(1)]
            out[m.start():m.end()] = new + b" " * (m.end() - m.start() - len(new))
        else:
            name_end = m.start(2) + len(m.group(2))
            new = ATTRIBUTE_CALLS[m.group(2)]
            out[m.start(2):name_end] = new + b" " * (name_end - m.start(2) - len(new))
    return found


def _balanced_end(src: bytes, open_paren: int) -> int:
    """The index after the `)` matching the `(` at ``open_paren`` on the same logical line, or -1."""
    depth = 0
    i = open_paren
    n = len(src)
    while i < n:
        c = src[i]
        if c == 40:  # (
            depth += 1
        elif c == 41:  # )
            depth -= 1
            if depth == 0:
                return i + 1
        elif c == 10 and src[i - 1:i] != b"\\":
            if depth > 1:
                pass  # arguments may continue on the next line
        elif c in (59, 123, 125):  # ; { }
            return -1
        i += 1
    return -1


def file_scope_invocations(src: bytes) -> list[tuple[int, int]]:
    """Byte spans of file-scope macro calls written without a `;` (instantiation macros)."""
    spans: list[tuple[int, int]] = []
    defined = None
    for m in _TOP_CALL.finditer(b"\n" + src):  # (one byte ahead: offsets are shifted back below)
        name = m.group(1)
        if name in ATTRIBUTES or name in ATTRIBUTE_CALLS or name.startswith(b"__"):
            continue
        if defined is None:
            defined = set(_DEFINED_FN.findall(src))
        if name not in defined and _CAPITALS.fullmatch(name) is None:
            continue
        start = m.start(1) - 1
        end = _balanced_end(src, m.end() - 2)
        if end < 0:
            continue
        line_end = src.find(b"\n", end)
        line_end = len(src) if line_end < 0 else line_end
        rest = src[end:line_end].strip()
        if rest and not rest.startswith(b"//"):
            continue  # `NAME(...) {`, `NAME(...);`, `NAME(...) int f()`: not a bare invocation
        following = src[line_end + 1:line_end + 200].lstrip(b" \t\r\n")
        if following.startswith((b"{", b":")) or _DECL_START.match(following):
            continue  # a function header written as a macro, or an attribute before one
        spans.append((start, end))
    return spans
