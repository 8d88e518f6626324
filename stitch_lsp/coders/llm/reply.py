"""Turn a model reply into a Candidate, or into a clear reason why it is not one.

The format (see ``llm_prompt.SYSTEM_RULES``): a short plan in prose, one ```cuda
block, one ```python block defining ``ModelNew``. A reply that breaks it ends the
round; the reason goes back to the model as feedback. Nothing here runs the code:
the Python is only parsed.
"""

from __future__ import annotations

import ast
import re
import sys

from attrs import define, field

from stitch_lsp.pipeline import Candidate

KERNEL_FILE = "kernel.cu"  # the one CUDA file a reply's code becomes

PYTHON_TAGS = {"python", "py", "python3"}
CUDA_TAGS = {"cuda", "cu"}
# Tags a model uses for CUDA-ish code; answered with "label it cuda", not "wrong language".
CXX_TAGS = {"cpp", "c++", "cxx", "c", "cuh", "h", "hpp"}

# What the binding may import where the kernel runs (the user's program, the Verifier's worker).
ALLOWED_IMPORT_ROOTS = {"torch", "stitch_lsp.runtime"}
# Standard-library modules that have no business in a binding (the Verifier flags their use too).
FORBIDDEN_STDLIB = {"subprocess", "multiprocessing", "threading", "_thread", "concurrent", "asyncio",
                    "socket", "ctypes", "signal", "urllib", "http", "importlib", "inspect", "gc"}

_FENCE = re.compile(r"^(?P<indent>[ \t]{0,3})(?P<fence>`{3,}|~{3,})[ \t]*(?P<info>[^`\n]*)$")


@define
class CodeBlock:
    tag: str  # the info string's first word, lower-case ("" when untagged)
    text: str
    line: int  # 1-based line of the opening fence in the reply


@define
class ParsedReply:
    candidate: Candidate | None
    problem: str = ""  # why the reply is not a usable candidate; goes back to the model
    plan: str = ""  # the prose before the first block
    blocks: list[CodeBlock] = field(factory=list)

    @property
    def ok(self) -> bool:
        return self.candidate is not None


def code_blocks(text: str) -> tuple[list[CodeBlock], CodeBlock | None]:
    """Fenced blocks in ``text``, and the block left open at the end (a cut reply), if any."""
    blocks: list[CodeBlock] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        match = _FENCE.match(lines[i])
        if not match:
            i += 1
            continue
        fence = match["fence"]
        tag = (match["info"].split() or [""])[0].lower()
        start = i
        body: list[str] = []
        i += 1
        closed = False
        while i < len(lines):
            close = _FENCE.match(lines[i])
            if close and close["fence"][0] == fence[0] and len(close["fence"]) >= len(fence) and not close["info"].strip():
                closed = True
                break
            body.append(lines[i])
            i += 1
        block = CodeBlock(tag=tag, text="\n".join(body) + "\n", line=start + 1)
        if not closed:
            return blocks, block
        blocks.append(block)
        i += 1
    return blocks, None


def parse_reply(text: str, *, stop_reason: str | None = None, max_tokens: int | None = None) -> ParsedReply:
    blocks, unclosed = code_blocks(text)
    first_fence = min((b.line for b in blocks), default=None)
    plan = "\n".join(text.splitlines()[: (first_fence - 1) if first_fence else None]).strip()

    def fail(problem: str) -> ParsedReply:
        return ParsedReply(candidate=None, problem=problem, plan=plan, blocks=blocks)

    if unclosed is not None or (stop_reason == "max_tokens" and not _has_both(blocks)):
        limit = f" ({max_tokens} output tokens)" if max_tokens else ""
        where = f" inside the ```{unclosed.tag or ''} block that starts at line {unclosed.line}" if unclosed else ""
        reason = "the reply hit its token limit" if stop_reason == "max_tokens" else "the reply ended"
        return fail(
            f"Your reply was cut off: {reason}{limit}{where}, so the code is incomplete. "
            "Send the complete files again, more compactly (less prose, no commented-out code)."
        )
    if not blocks:
        return fail(
            "Your reply had no code block. Answer with exactly one ```cuda block (the kernel) "
            "and exactly one ```python block (the module defining ModelNew)."
        )

    python = [b for b in blocks if b.tag in PYTHON_TAGS]
    cuda = [b for b in blocks if b.tag in CUDA_TAGS]
    others = [b for b in blocks if b.tag not in PYTHON_TAGS | CUDA_TAGS]
    for block in others:
        if not block.tag:
            return fail(
                f"The code block at line {block.line} of your reply has no language tag. Label the kernel "
                "```cuda and the binding ```python; send no other blocks."
            )
        if block.tag in CXX_TAGS:
            return fail(
                f"The code block at line {block.line} is tagged ```{block.tag}. The reply format takes CUDA C++ "
                "only in one ```cuda block (host code included) plus one ```python block; send no other blocks."
            )
        return fail(
            f"The code block at line {block.line} is in the wrong language (```{block.tag}). Stitch takes "
            "exactly one ```cuda block and one ```python block — no Triton, shell or other languages."
        )
    if len(python) > 1:
        return fail(
            f"Your reply had {len(python)} ```python blocks (lines {', '.join(str(b.line) for b in python)}). "
            "Send exactly one: the complete module defining ModelNew."
        )
    if len(cuda) > 1:
        return fail(
            f"Your reply had {len(cuda)} ```cuda blocks (lines {', '.join(str(b.line) for b in cuda)}). "
            f"Put all kernels and host functions in one ```cuda block (it becomes {KERNEL_FILE})."
        )
    if not python:
        return fail("Your reply had no ```python block. Send the complete module defining ModelNew.")
    if not cuda:
        return fail(
            "Your reply had no ```cuda block. ModelNew must run your own CUDA kernel: send it in one ```cuda block."
        )

    module_source, kernel_source = python[0].text, cuda[0].text
    problem = check_module(module_source) or check_kernel(kernel_source)
    if problem:
        return fail(problem)
    candidate = Candidate(
        module_source=module_source,
        cuda_sources={KERNEL_FILE: kernel_source},
        coder="llm",
        notes=[plan] if plan else [],
    )
    return ParsedReply(candidate=candidate, plan=plan, blocks=blocks)


def _has_both(blocks: list[CodeBlock]) -> bool:
    return any(b.tag in PYTHON_TAGS for b in blocks) and any(b.tag in CUDA_TAGS for b in blocks)


def check_module(source: str) -> str:
    """Why the binding cannot be a candidate ("" when it can): syntax, ModelNew, imports, loader."""
    try:
        tree = ast.parse(source)
    except SyntaxError as err:
        return f"The ```python block does not parse: line {err.lineno}: {err.msg}. Send the corrected module."
    if not any(isinstance(node, ast.ClassDef) and node.name == "ModelNew" for node in tree.body):
        return "The ```python block does not define `class ModelNew` at module level."
    for name, line in imported_modules(tree):
        root = name.split(".")[0]
        if name == "stitch_lsp" or name.startswith("stitch_lsp."):
            if not (name == "stitch_lsp.runtime" or name.startswith("stitch_lsp.runtime.")):
                return (f"Line {line} imports `{name}`; of Stitch only `stitch_lsp.runtime.loader` is available "
                        "where the kernel runs.")
            continue
        if root == "torch":
            continue
        if root in FORBIDDEN_STDLIB:
            return (f"Line {line} imports `{name}`, which a kernel binding may not use (threads, processes, "
                    "introspection and the network are treated as cheating). Remove it.")
        if root in sys.stdlib_module_names:
            continue
        return (f"Line {line} imports `{name}`, which is not available where the kernel runs: use only torch, "
                "the Python standard library and `stitch_lsp.runtime.loader` (CUDA goes in the ```cuda block).")
    if "load_kernel" not in source:
        return ("The module never calls `stitch_lsp.runtime.loader.load_kernel`, so your CUDA would not run. "
                "Load the ```cuda block with it as the format shows.")
    return ""


def imported_modules(tree: ast.AST) -> list[tuple[str, int]]:
    found: list[tuple[str, int]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative import: nothing sits next to the module but the kernel
                found.append(("." * node.level + (node.module or ""), node.lineno))
            elif node.module:
                found.append((node.module, node.lineno))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "__import__":
            found.append(("__import__", node.lineno))
    return found


# Host-side constructs NVRTC cannot compile (the loader compiles device code only).
_HOST_ONLY = [
    (re.compile(r"#\s*include\s*[<\"](torch/|ATen/|c10/|pybind11/)"), "includes PyTorch / pybind11 headers"),
    (re.compile(r"\bPYBIND11_MODULE\b|\bTORCH_LIBRARY\b"), "defines a Python extension module"),
    (re.compile(r"^\s*int\s+main\s*\(", re.M), "defines main()"),
    (re.compile(r"<<<"), "launches kernels from C++ (<<<...>>>)"),
]


def check_kernel(source: str) -> str:
    if not source.strip():
        return "The ```cuda block is empty."
    if "__global__" not in source:
        return "The ```cuda block defines no `__global__` kernel: the computation must run in your CUDA."
    for pattern, what in _HOST_ONLY:
        if match := pattern.search(source):
            line = source.count("\n", 0, match.start()) + 1
            return (f"The ```cuda block {what} (line {line}). It is compiled with NVRTC as device code only: "
                    "kernels and __device__ helpers; launch them from Python with load_kernel(...)(grid=, "
                    "block=, args=[...]).")
    return ""
