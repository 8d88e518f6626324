"""Selection → Region on real-looking model code: inputs, outputs, ops, module needs, bad selections."""

from __future__ import annotations

from pathlib import Path

from stitch_lsp.analysis.region.python_region import extract_region

SRC = (Path(__file__).resolve().parents[1] / "fixtures" / "fuse" / "block.py").read_text()
LINES = SRC.splitlines()


def line_of(text: str) -> int:
    return next(i for i, l in enumerate(LINES) if text in l)


def region(first: str, last: str | None = None):
    return extract_region(SRC, line_of(first), line_of(last or first), "block.py")


def test_free_function_with_return():
    r = region("y = x + b", "return z")
    assert r.fusable, r.problems
    assert r.function == "gelu_bias" and r.class_name is None
    assert r.inputs == ["x", "b"]
    assert r.returns and r.return_expr == "z"
    assert r.ops.count("+") == 1 and "F.gelu" in r.ops and "*" in r.ops


def test_forward_method_attribute_access_and_outputs():
    r = region("h = self.norm(x + residual)", "h = h * self.scale + self.shift")
    assert r.fusable, r.problems
    assert r.class_name == "Block" and r.function == "forward"
    assert r.inputs == ["x", "residual"]
    assert r.outputs == ["h"]  # used after the selection (self.up(h), return)
    kinds = {n.name: n.kind for n in r.self_needs}
    assert kinds == {"norm": "module", "scale": "parameter", "shift": "buffer"}
    norm = next(n for n in r.self_needs if n.name == "norm")
    assert norm.init_source == "nn.LayerNorm(hidden, eps=EPS)"
    assert r.module_names == {"EPS": "EPS = 1e-5"}  # needed by the LayerNorm's constructor
    assert ("hidden", "256") in r.init_params


def test_multiple_outputs_and_in_place_op():
    r = region("a, b = y.chunk(2, dim=-1)", "out.mul_(2.0)")
    assert r.fusable, r.problems
    assert r.inputs == ["y"]
    assert r.outputs == ["out"]  # a and b are not used afterwards; out is (mutated in place)
    assert "torch.sigmoid" in r.ops and ".mul_" in r.ops


def test_split_statement_is_refused():
    start = line_of("def helper")
    r = extract_region(SRC, line_of("y = x + b"), line_of("y = x + b"), "block.py")
    assert r.fusable  # one whole line is fine
    r = extract_region(SRC, line_of("if out.sum() > 0"), line_of("if out.sum() > 0"), "block.py")
    assert any("splits a statement" in p for p in r.problems)
    assert start > 0


def test_control_flow_unknown_call_and_no_ops():
    r = region("if out.sum() > 0", "out = out * 2")
    assert any("control flow" in p for p in r.problems)
    r = region("s = helper(out)")  # a function of this file: copied into the Task, inlined by tracing
    assert "helper" in r.helpers and r.helpers["helper"].startswith("def helper(t)")
    r = extract_region("def f(x):\n    y = x\n    return y\n", 1, 1)
    assert any("no tensor ops" in p for p in r.problems)


def test_outside_a_function_and_nothing_used_after():
    r = extract_region(SRC, line_of("EPS = 1e-5"), line_of("EPS = 1e-5"))
    assert any("inside a function" in p for p in r.problems)
    r = extract_region("def f(x):\n    y = x * 2\n    return x\n", 1, 1)
    assert any("used after" in p for p in r.problems)


def test_a_selection_in_init_is_refused_with_the_reason():
    r = extract_region(SRC, line_of("self.up = nn.Linear"), line_of("self.norm = nn.LayerNorm"), "block.py")
    assert any("__init__" in p and "forward" in p for p in r.problems), r.problems


def test_tuple_assigned_module_constants_reach_the_task():
    src = (
        "import torch\n\nM, N = 64, 80\nSCALE = 1.0 / N\n\n\n"
        "def f(x):\n    # stitch: x=[64,80] float32\n    y = torch.relu(x) * SCALE + M\n    return y\n"
    )
    from stitch_lsp.task.selection import prepare
    from stitch_lsp.settings import Settings

    p = prepare(src, "m.py", 8, 8, Settings())
    assert p.task is not None, p.problem
    assert p.task.source.count("M, N = 64, 80") == 1 and "SCALE = 1.0 / N" in p.task.source
    assert p.task.source.index("M, N = 64, 80") < p.task.source.index("SCALE = 1.0 / N")
    ns: dict = {}
    exec(compile(p.task.source, "task", "exec"), ns)
