"""Each function of a Python file: its qualified name, first and last line, and a hash of its text.

Stdlib only: the recorder (in the user's interpreter) and the server (which never runs
user code) both key recordings with it, so an edit to one function changes that
function's key alone.
"""

from __future__ import annotations

import ast
import hashlib


def function_spans(source: str) -> dict[int, tuple[str, int, int, str]]:
    """First line (``def`` line or first decorator, as ``co_firstlineno``) -> (qualname, first, last, sha)."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return {}
    lines = source.splitlines()
    out: dict[int, tuple[str, int, int, str]] = {}

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                name = prefix + child.name
                first = min([child.lineno] + [d.lineno for d in child.decorator_list])
                last = child.end_lineno or child.lineno
                text = "\n".join(lines[first - 1:last])
                out[first] = (name, first, last, hashlib.sha256(text.encode("utf-8", "replace")).hexdigest()[:16])
                visit(child, name + ".<locals>.")
            elif isinstance(child, ast.ClassDef):
                visit(child, prefix + child.name + ".")
            elif not isinstance(child, ast.Lambda):
                visit(child, prefix)

    visit(tree, "")
    return out
