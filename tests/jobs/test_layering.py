"""jobs/ and reports/ are plain Python: no LSP (only lsp/ knows pygls), no torch (only workers do)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "stitch_lsp"
FORBIDDEN = ("pygls", "lsprotocol", "stitch_lsp.lsp", "torch")


def _imports(path: Path) -> list[str]:
    """Modules imported anywhere in ``path`` except inside generated-code string templates."""
    names = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.append(node.module)
    return names


@pytest.mark.parametrize("path", sorted((PACKAGE / "jobs").glob("*.py")) + sorted((PACKAGE / "reports").glob("*.py")),
                         ids=lambda p: f"{p.parent.name}/{p.name}")
def test_plain_python_layers_import_no_lsp_and_no_torch(path):
    bad = [m for m in _imports(path) if any(m == f or m.startswith(f + ".") for f in FORBIDDEN)]
    assert bad == [], f"{path.name} imports {bad}"
