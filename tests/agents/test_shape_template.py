"""The `# stitch:` template the shape quick fix inserts: shapes the selection can run with, as inserted."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from stitch_lsp.task.selection import prepare
from stitch_lsp.task.shapes import comment_template, resolve
from stitch_lsp.analysis.region.python_region import extract_region
from stitch_lsp.settings import Settings

REPO = Path(__file__).resolve().parents[2]

# (id, function or class source, first selected line (substring), number of lines)
SELECTIONS = [
    ("matmul-epilogue", """
        import torch
        import torch.nn.functional as F

        def f(x, w, b, scale):
            y = F.gelu(x @ w + b) * scale
            return y
        """, "y = F.gelu", 1),
    ("matmul-weight-first", """
        import torch

        def f(x, w):
            y = torch.relu(w @ x)
            return y
        """, "y = torch.relu", 1),
    ("f-linear", """
        import torch
        import torch.nn.functional as F

        def f(x, w, bias):
            y = F.linear(x, w, bias).relu() * 2.0
            return y
        """, "y = F.linear", 1),
    ("transposed-weight", """
        import torch

        def f(x, w, b):
            y = torch.sigmoid(x @ w.T + b)
            return y
        """, "y = torch.sigmoid", 1),
    ("transposed-method", """
        import torch

        def f(x, w, b):
            y = torch.tanh(x @ w.t() + b)
            return y
        """, "y = torch.tanh", 1),
    ("cross-entropy", """
        import torch
        import torch.nn.functional as F

        def f(logits, target, t):
            loss = F.cross_entropy(logits / t, target)
            return loss
        """, "loss = F", 1),
    ("layer-norm-affine", """
        import torch
        import torch.nn.functional as F

        def f(x, weight, bias, residual):
            h = F.layer_norm(x + residual, (x.shape[-1],), weight, bias)
            y = F.silu(h)
            return y
        """, "h = F.layer_norm", 2),
    ("reduction-keepdim", """
        import torch

        def f(x, g):
            m = (x * torch.sigmoid(g)).sum(-1, keepdim=True)
            y = x - m
            return y
        """, "m = (x", 2),
    ("module-linear-from-init-arg", """
        import torch
        from torch import nn

        class Block(nn.Module):
            def __init__(self, dim, mult=4):
                super().__init__()
                self.up = nn.Linear(dim, dim * mult)
                self.gain = nn.Parameter(torch.ones(dim * mult))

            def forward(self, x, r):
                h = self.up(x) * self.gain
                y = torch.nn.functional.gelu(h) + r
                return y
        """, "h = self.up", 2),
    ("norm-after-the-add", """
        import torch
        from torch import nn

        DTYPE = torch.bfloat16

        class Block(nn.Module):
            def __init__(self, hidden=256):
                super().__init__()
                self.norm = nn.LayerNorm(hidden, dtype=DTYPE)

            def forward(self, x, residual):
                h = self.norm(x + residual)
                y = torch.nn.functional.silu(h)
                return y
        """, "h = self.norm", 2),
    ("scaled-parameter", """
        import torch
        import torch.nn as nn
        import torch.nn.functional as F

        M, N = 64, 80

        class Bias(nn.Module):
            def __init__(self, features):
                super().__init__()
                self.bias = nn.Parameter(0.5 * torch.randn(features))

            def forward(self, x):
                return F.gelu(x + self.bias)
        """, "return F.gelu", 1),
    ("bmm-batched", """
        import torch

        def f(q, k, scale):
            s = torch.softmax(torch.bmm(q, k) * scale, dim=-1)
            return s
        """, "s = torch", 1),
    ("where-mask", """
        import torch

        def f(x, y, mask):
            z = torch.where(mask, x, y).exp()
            return z
        """, "z = torch", 1),
]


def _case(case_id: str) -> str:
    return next(text for cid, text, _, _ in SELECTIONS if cid == case_id)


def _region(text: str, needle: str, count: int):
    src = textwrap.dedent(text).lstrip()
    start = next(i for i, l in enumerate(src.splitlines()) if needle in l)
    return src, start, start + count - 1


def _with_template(text: str, needle: str, count: int) -> tuple[str, int, int, str]:
    src, start, end = _region(text, needle, count)
    region = extract_region(src, start, end, "m.py")
    assert not region.problems, region.problems
    comment = comment_template(region, resolve(region, src))
    lines = src.splitlines()
    lines.insert(start, comment)
    return "\n".join(lines) + "\n", start + 1, end + 1, comment


def test_bug_report_template_never_gives_w_the_shape_of_x():
    src, start, end = _region(_case("matmul-epilogue"), "y = F.gelu", 1)
    region = extract_region(src, start, end, "m.py")
    comment = comment_template(region, resolve(region, src, {"x": "8x1024 float32"}))
    assert "x=[8,1024] float32" in comment
    assert "w=[1024,N]" in comment and "N=1024" in comment  # w's first dim is x's last
    assert "b=[N]" in comment and "scale=[N]" in comment


def test_transposed_weight_takes_out_features_first():
    src, start, end = _region(_case("transposed-weight"), "y = torch.sigmoid", 1)
    region = extract_region(src, start, end, "m.py")
    comment = comment_template(region, resolve(region, src, {"x": "8x1024 float32"}))
    assert "w=[N,1024]" in comment and "b=[N]" in comment, comment


def test_template_keeps_what_the_comment_it_replaces_says():
    src, start, end = _region(_case("module-linear-from-init-arg"), "h = self.up", 2)
    lines = src.splitlines()
    lines.insert(start, "        # stitch: dim=64, x=[8,dim] bf16")
    text = "\n".join(lines)
    region = extract_region(text, start + 1, end + 1, "m.py")
    comment = comment_template(region, resolve(region, text))
    assert comment.strip().startswith("# stitch: dim=64,") and "x=[8,64] bfloat16" in comment, comment
    assert "r=[8,256] bfloat16" in comment, comment  # dim * mult with dim=64 and mult's default 4
    lines[start] = comment
    replaced = "\n".join(lines)
    p = prepare(replaced, "m.py", start + 1, end + 1, Settings())
    assert p.task is not None and "dim = 64" in p.task.source, p.problem


def test_a_later_op_fixes_a_size_an_earlier_one_left_open():
    """x + residual leaves the width open; the LayerNorm(hidden=256) after it fixes it, in bf16 like its weights."""
    src, start, end = _region(_case("norm-after-the-add"), "h = self.norm", 2)
    region = extract_region(src, start, end, "m.py")
    comment = comment_template(region, resolve(region, src))
    assert "x=[B,256] bfloat16" in comment and "residual=[B,256] bfloat16" in comment, comment
    assert "D=" not in comment


def test_a_parameter_made_from_an_init_argument_names_it():
    src, start, end = _region(_case("scaled-parameter"), "return F.gelu", 1)
    region = extract_region(src, start, end, "m.py")
    comment = comment_template(region, resolve(region, src))
    assert "features=1024" in comment and "x=[B,features]" in comment, comment


def test_named_dimensions_parse_and_unknown_names_are_reported():
    src, start, end = _region(_case("matmul-epilogue"), "y = F.gelu", 1)
    lines = src.splitlines()
    lines.insert(start, "    # stitch: B=4, K=64, x=[B,K] bf16, w=[K, 32] bf16, b=[32] bf16, scale=[32] bf16")
    ok = "\n".join(lines)
    s = resolve(extract_region(ok, start + 1, end + 1, "m.py"), ok)
    assert s.complete and not s.problems
    assert s.specs["x"].shape == (4, 64) and s.specs["x"].dtype == "bfloat16" and s.specs["w"].shape == (64, 32)
    bad = ok.replace("B=4, ", "")
    p = prepare(bad, "m.py", start + 1, end + 1, Settings())
    assert p.task is None and "'B' is not a size" in p.problem and "add B=<size>" in p.problem, p.problem


@pytest.mark.parametrize("text,needle,count", [c[1:] for c in SELECTIONS], ids=[c[0] for c in SELECTIONS])
def test_template_parses_back_to_complete_shapes(text, needle, count):
    src, start, end, comment = _with_template(text, needle, count)
    p = prepare(src, "m.py", start, end, Settings())
    assert p.task is not None, (comment, p.problem)
    assert p.shapes.sources and set(p.shapes.sources.values()) <= {"comment", "default"}


@pytest.mark.timeout(300)
def test_every_template_runs_the_selection_as_inserted():
    """The Task built from each inserted template runs on CPU torch: the shapes agree with the ops."""
    tasks = {}
    for case_id, text, needle, count in SELECTIONS:
        src, start, end, comment = _with_template(text, needle, count)
        if case_id == "module-linear-from-init-arg":
            assert "dim=" in comment  # the __init__ argument the shapes depend on is defined in the comment
        p = prepare(src, "m.py", start, end, Settings())
        assert p.task is not None, (case_id, comment, p.problem)
        tasks[case_id] = p.task.source
    probe = textwrap.dedent("""
        import json, sys
        import torch
        failures = {}
        for case_id, source in json.loads(sys.stdin.read()).items():
            ns = {"__name__": case_id}
            try:
                exec(compile(source, case_id, "exec"), ns)
                ns["Model"](*ns["get_init_inputs"]())(*ns["get_inputs"]())
            except Exception as exc:
                failures[case_id] = f"{type(exc).__name__}: {exc}"
        print(json.dumps(failures))
    """)
    run = subprocess.run([sys.executable, "-c", probe], input=json.dumps(tasks), capture_output=True, text=True,
                         timeout=300, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert run.returncode == 0, run.stderr[-3000:]
    assert json.loads(run.stdout) == {}
