"""Shapes from get_inputs / a `# stitch:` comment / settings, and the Task built from a Region."""

from __future__ import annotations

from pathlib import Path

import pytest

from stitch_lsp.task.selection import prepare
from stitch_lsp.task.shapes import comment_template, parse_spec, resolve
from stitch_lsp.analysis.region.python_region import extract_region
from stitch_lsp.settings import Settings

SRC = (Path(__file__).resolve().parents[1] / "fixtures" / "fuse" / "block.py").read_text()
LINES = SRC.splitlines()


def line_of(text: str) -> int:
    return next(i for i, l in enumerate(LINES) if text in l)


def test_get_inputs_gives_forward_input_shapes_and_init_values():
    r = extract_region(SRC, line_of("h = self.norm"), line_of("h = h * self.scale"), "block.py")
    s = resolve(r, SRC)
    assert s.complete
    assert s.specs["x"].shape == (32, 256) and s.specs["x"].dtype == "float32"
    assert s.sources["x"] == "get_inputs"
    assert s.values["hidden"] == "256" and s.sources["hidden"] == "get_init_inputs"


def test_intermediate_needs_a_comment_or_settings_and_never_a_guess():
    r = extract_region(SRC, line_of("a, b = y.chunk"), line_of("out.mul_(2.0)"), "block.py")
    assert resolve(r, SRC).missing == ["y"]
    with_setting = resolve(r, SRC, {"y": "32x1024 bf16"})
    assert with_setting.specs["y"].shape == (32, 1024) and with_setting.specs["y"].dtype == "bfloat16"
    commented = SRC.replace("        a, b = y.chunk", "        # stitch: y=[32, 1024] fp16\n        a, b = y.chunk")
    r2 = extract_region(commented, line_of("a, b = y.chunk") + 1, line_of("out.mul_(2.0)") + 1, "block.py")
    s = resolve(r2, commented)
    assert s.specs["y"].dtype == "float16" and s.sources["y"] == "comment"
    assert comment_template(r2, s) == "        # stitch: y=[32,1024] float16"


def test_parse_spec_rejects_nonsense():
    assert parse_spec("8x1024 float32").shape == (8, 1024)
    with pytest.raises(ValueError):
        parse_spec("eight by ten")


def test_task_recreates_what_the_selection_uses():
    p = prepare(SRC, "block.py", line_of("h = self.norm"), line_of("h = h * self.scale"), Settings())
    assert p.task is not None, p.problem
    src = p.task.source
    assert "self.norm = nn.LayerNorm(hidden, eps=EPS)" in src
    assert 'self.register_buffer("shift", torch.randn(hidden))' in src  # the file's own statement
    assert "hidden = 256" in src and "EPS = 1e-5" in src
    assert "self.up" not in src  # not used by the selection
    assert "def forward(self, x, residual):" in src and "return h" in src
    assert "torch.randn(32, 256, dtype=torch.float32)" in src
    ns: dict = {}
    exec(compile(src, "task", "exec"), ns)  # the Task is a valid KernelBench module
    assert set(ns) >= {"Model", "get_inputs", "get_init_inputs"}
    assert p.task.input_names == ["x", "residual"] and p.task.output_names == ["h"]


def test_missing_shapes_say_what_is_missing():
    p = prepare(SRC, "block.py", line_of("a, b = y.chunk"), line_of("out.mul_(2.0)"), Settings())
    assert p.task is None and "no shapes for y" in p.problem


def test_recorder_runs_the_file_and_finds_intermediate_shapes():
    """Shape source 3: the file's get_inputs() run on the meta device, locals read at the selection."""
    pytest.importorskip("torch")
    from stitch_lsp.task.shapes import record

    path = str(Path(__file__).resolve().parents[1] / "fixtures" / "fuse" / "block.py")
    r = extract_region(SRC, line_of("a, b = y.chunk"), line_of("out.mul_(2.0)"), path)
    recorded, why = record(r, SRC)
    assert recorded is not None, why
    assert recorded.specs["y"].shape == (32, 1024) and recorded.sources["y"] == "recorder"
    p = prepare(SRC, "block.py", line_of("a, b = y.chunk"), line_of("out.mul_(2.0)"), Settings(), recorded)
    assert p.task is not None and "torch.randn(32, 1024" in p.task.source


def test_recorder_says_why_it_cannot_run():
    pytest.importorskip("torch")
    from stitch_lsp.task.shapes import record

    src = "import torch\n\ndef f(x):\n    y = x * 2\n    z = y + 1\n    return z\n"
    r = extract_region(src, 4, 4, "nofile.py")
    recorded, why = record(r, src)
    assert recorded is None and "get_inputs" in why
