"""The invariants of ARCHITECTURE.md, checked on the source: who may import whom, where torch and pygls may be
imported, that nothing but the worker contract names a worker module, and that no modules import each other
in a loop.

Every module under ``stitch_lsp/`` is read with ``ast`` (nothing is imported): its imports at the top, those
inside functions (lazy ones count: they run too), ``importlib.import_module`` of a name the code spells out,
and strings that name a ``stitch_lsp`` module (``python -m stitch_lsp.worker...``). A failure names the file,
the line and the import that breaks the rule.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGE = "stitch_lsp"


@dataclass(frozen=True)
class Edge:
    importer: str  # the module that imports
    target: str  # what it imports: the deepest stitch_lsp module the name reaches, or the third-party name
    path: str
    line: int
    how: str  # "import", "lazy import", "import_module", "registry" (a module found by name), "names"
    type_only: bool = False  # under ``if TYPE_CHECKING:``: never runs

    def __str__(self) -> str:
        verb = {"names": "names the module", "import_module": "import_module()s",
                "registry": "may load by name"}.get(self.how, self.how + "s")
        return f"{self.path}:{self.line} {verb} {self.target}"


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _resolve(name: str, modules: set[str]) -> str:
    """The deepest module ``name`` reaches (``stitch_lsp.plan.op_table.classify`` -> ``stitch_lsp.plan.op_table``)."""
    if not name.startswith(PACKAGE):
        return name
    probe = name
    while probe and probe not in modules:
        probe = probe.rpartition(".")[0]
    return probe or name


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _module_of_from(node: ast.ImportFrom, importer: str, is_package: bool) -> str:
    if not node.level:
        return node.module or ""
    base = importer.split(".") if is_package else importer.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


class _Visitor(ast.NodeVisitor):
    def __init__(self, importer: str, path: str, is_package: bool, modules: set[str]) -> None:
        self.importer, self.path, self.is_package, self.modules = importer, path, is_package, modules
        self.depth = 0  # inside a function
        self.type_only = 0
        self.edges: list[Edge] = []

    def _add(self, name: str, line: int, how: str) -> None:
        self.edges.append(Edge(self.importer, _resolve(name, self.modules), self.path, line, how,
                               bool(self.type_only)))

    def _how(self) -> str:
        return "lazy import" if self.depth else "import"

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        self.depth += 1
        self.generic_visit(node)
        self.depth -= 1

    visit_AsyncFunctionDef = visit_FunctionDef  # type: ignore[assignment]

    def visit_If(self, node: ast.If) -> None:
        if _is_type_checking(node.test):
            self.type_only += 1
            for child in node.body:
                self.visit(child)
            self.type_only -= 1
            for child in node.orelse:
                self.visit(child)
        else:
            self.generic_visit(node)

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self._add(alias.name, node.lineno, self._how())

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        base = _module_of_from(node, self.importer, self.is_package)
        for alias in node.names:
            full = f"{base}.{alias.name}"
            self._add(full if full in self.modules else base, node.lineno, self._how())

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        called = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
        if called == "import_module" and node.args:
            arg = node.args[0]
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                self._add(arg.value, node.lineno, "import_module")
            elif isinstance(arg, ast.JoinedStr) and arg.values and isinstance(arg.values[0], ast.Constant):
                # f"stitch_lsp.commands.{name}": a registry of plug-ins, any module of that package
                prefix = str(arg.values[0].value)
                for module in sorted(m for m in self.modules if m.startswith(prefix)):
                    self._add(module, node.lineno, "registry")
        self.generic_visit(node)

    def visit_Constant(self, node: ast.Constant) -> None:
        value = node.value
        if isinstance(value, str) and value.startswith(PACKAGE + ".") and value in self.modules:
            self._add(value, node.lineno, "names")


def read_edges(root: Path) -> list[Edge]:
    """Every import (and module-naming string) of the package under ``root``."""
    files = sorted((root / PACKAGE).rglob("*.py"))
    modules = {module_name(f, root) for f in files}
    edges: list[Edge] = []
    for file in files:
        visitor = _Visitor(module_name(file, root), str(file.relative_to(root)), file.name == "__init__.py", modules)
        visitor.visit(ast.parse(file.read_text(encoding="utf-8"), str(file)))
        edges += visitor.edges
    return edges


def inside(module: str, *packages: str) -> bool:
    return any(module == f"{PACKAGE}.{p}" or module.startswith(f"{PACKAGE}.{p}.") for p in packages)


@dataclass(frozen=True)
class Rule:
    says: str  # the invariant, as ARCHITECTURE.md words it
    applies: Callable[[Edge], bool]  # the edges it judges
    allowed: Callable[[Edge], bool]


WORKER_MAY_USE = ("worker", "contract", "runtime", "op_graph", "serde", "verdict", "findings")
SEAM = f"{PACKAGE}.coders"

RULES = [
    Rule("Only lsp/ imports pygls or lsprotocol.",
         lambda e: e.target.split(".")[0] in ("pygls", "lsprotocol"),
         lambda e: inside(e.importer, "lsp")),
    Rule("Only worker/ and runtime/ import torch or triton (the server process never does).",
         lambda e: e.target.split(".")[0] in ("torch", "triton") and not e.type_only,
         lambda e: inside(e.importer, "worker", "runtime")),
    Rule("worker/ imports only the worker contract, the shared data types (op_graph, serde, verdict, findings) "
         "and runtime/.",
         lambda e: inside(e.importer, "worker") and e.target.startswith(PACKAGE) and e.how != "names",
         lambda e: inside(e.target, *WORKER_MAY_USE)),
    Rule("Nothing outside worker/ imports a worker module; code that runs one as a process names it through "
         "the contract.",
         lambda e: inside(e.target, "worker") and not inside(e.importer, "worker"),
         lambda e: e.how == "names" and inside(e.importer, "contract")),
    Rule("Nothing below lsp/ imports lsp/ (worker/ and analysis/ above all); only `python -m stitch_lsp` "
         "starts it.",
         lambda e: inside(e.target, "lsp") and e.how != "names",
         lambda e: inside(e.importer, "lsp") or e.importer == f"{PACKAGE}.__main__"),
    Rule("plan/ and task/ never import coders/ or fuse/.",
         lambda e: inside(e.importer, "plan", "task") and inside(e.target, "coders", "fuse"),
         lambda e: False),
    Rule("Outside coders/, a Coder is reached only through its seam, stitch_lsp.coders (the editor also reads "
         "the LLM Coder's key store; moved.py names where old generated code's imports now live).",
         lambda e: inside(e.target, "coders") and not inside(e.importer, "coders"),
         lambda e: e.target == SEAM or (inside(e.importer, "lsp") and e.target == f"{SEAM}.llm.key")
         or (e.importer == f"{PACKAGE}.moved" and e.how == "names")),
    Rule("A Coder never imports the fuse service, and the template Coder and the LLM Coder stay apart "
         "(the LLM Coder's auto mode asks the template Coder through its package).",
         lambda e: inside(e.importer, "coders") and inside(e.target, "fuse", "coders.template", "coders.llm"),
         lambda e: not inside(e.target, "fuse") and (
             inside(e.importer, "coders.template") == inside(e.target, "coders.template")
             or (e.importer == f"{SEAM}")
             or (inside(e.importer, "coders.llm") and e.target == f"{SEAM}.template"))),
    Rule("contract/ is plain data: it imports no other stage.",
         lambda e: inside(e.importer, "contract") and e.target.startswith(PACKAGE) and e.how != "names",
         lambda e: inside(e.target, "contract", "op_graph", "serde", "verdict")),
]


def violations(edges: list[Edge]) -> list[str]:
    out = []
    for rule in RULES:
        bad = [e for e in edges if rule.applies(e) and not rule.allowed(e)]
        out += [f"{rule.says}\n    {e}" for e in bad]
    return out


def cycles(edges: list[Edge]) -> list[list[str]]:
    """Groups of stitch_lsp modules that import each other, directly or round a loop. Imports under
    ``TYPE_CHECKING`` never run, so they make no loop; nor does a registry that loads its plug-ins by name
    once it is itself loaded (the server's features, the CLI's commands: each plug-in imports the host).
    Tarjan's strongly connected components."""
    graph: dict[str, set[str]] = {}
    for e in edges:
        if e.type_only or e.how in ("names", "registry") or not e.target.startswith(PACKAGE) or e.target == e.importer:
            continue
        if e.importer.startswith(e.target + "."):
            continue  # a module importing its own package's __init__ (which Python has imported already)
        graph.setdefault(e.importer, set()).add(e.target)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def loop_lines(group: list[str], edges: list[Edge]) -> list[str]:
    members = set(group)
    return [str(e) for e in edges if e.importer in members and e.target in members and not e.type_only
            and e.how not in ("names", "registry")]


MAX_MODULES = 20
MANY_MODULES_ALLOWED = {f"{PACKAGE}/analysis/rules"}  # the rule registry: one file per rule, by design


def crowded_folders(root: Path) -> list[str]:
    out = []
    for folder in sorted(p for p in (root / PACKAGE).rglob("*") if p.is_dir() and p.name != "__pycache__"):
        rel = str(folder.relative_to(root))
        modules = [f for f in folder.glob("*.py") if f.name not in ("__init__.py", "__main__.py")]
        if len(modules) > MAX_MODULES and rel not in MANY_MODULES_ALLOWED:
            out.append(f"{rel} holds {len(modules)} modules side by side (at most {MAX_MODULES})")
    return out


@pytest.fixture(scope="module")
def edges() -> list[Edge]:
    return read_edges(REPO)


def test_every_import_keeps_the_architecture_rules(edges):
    bad = violations(edges)
    assert not bad, "imports that break ARCHITECTURE.md's invariants:\n" + "\n".join(bad)


def test_no_modules_import_each_other_in_a_loop(edges):
    loops = cycles(edges)
    assert not loops, "import loops:\n" + "\n\n".join(
        " <-> ".join(g) + "\n    " + "\n    ".join(loop_lines(g, edges)) for g in loops)


def test_no_package_folder_is_crowded():
    crowded = crowded_folders(REPO)
    assert not crowded, "\n".join(crowded)


def test_architecture_md_states_the_invariants_this_test_enforces():
    text = (REPO / "ARCHITECTURE.md").read_text(encoding="utf-8")
    stated = [line for line in text.splitlines() if "**Invariant:**" in line]
    assert len(stated) >= 5, "ARCHITECTURE.md states fewer than five invariants"
    for rule in RULES:
        assert rule.says in text, f"ARCHITECTURE.md does not state: {rule.says}"


# The checker itself, on a small tree written for the purpose: each breach is named with its line.

def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = tmp_path / PACKAGE / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    for folder in [p for p in (tmp_path / PACKAGE).rglob("*") if p.is_dir()] + [tmp_path / PACKAGE]:
        (folder / "__init__.py").touch()
    return tmp_path


def test_the_checker_names_a_lazy_import_of_coder_internals_from_the_planner(tmp_path):
    root = _tree(tmp_path, {
        "plan/planner.py": "def make_plan():\n    from stitch_lsp.coders.template.gemm_tiles import choose\n",
        "coders/template/gemm_tiles.py": "def choose():\n    pass\n",
    })
    bad = violations(read_edges(root))
    assert any("stitch_lsp/plan/planner.py:2 lazy imports stitch_lsp.coders.template.gemm_tiles" in b for b in bad)
    assert any(b.startswith("plan/ and task/ never import coders/ or fuse/.") for b in bad)


def test_the_checker_names_a_worker_module_run_by_its_name_outside_the_contract(tmp_path):
    root = _tree(tmp_path, {
        "fuse/service.py": 'CMD = ["python", "-m", "stitch_lsp.worker.trace_handler"]\n',
        "contract/__init__.py": 'TRACE = "stitch_lsp.worker.trace_handler"\n',
        "worker/trace_handler.py": "import torch\n",
    })
    bad = violations(read_edges(root))
    assert [b.splitlines()[1].strip() for b in bad] == [
        "stitch_lsp/fuse/service.py:1 names the module stitch_lsp.worker.trace_handler"]


def test_the_checker_finds_a_loop_through_a_lazy_import_but_not_through_type_checking(tmp_path):
    root = _tree(tmp_path, {
        "task/shapes.py": "def f():\n    from stitch_lsp.task.shape_template import g\n",
        "task/shape_template.py": "from stitch_lsp.task.shapes import f\n",
        "analysis/a.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from stitch_lsp.analysis.b import B\n",
        "analysis/b.py": "from stitch_lsp.analysis.a import A\n",
    })
    assert cycles(read_edges(root)) == [["stitch_lsp.task.shape_template", "stitch_lsp.task.shapes"]]
