"""The `# stitch:` comment: scalars, config objects (against the file's own class), tensors; every bad entry a
one-line problem naming it; proposals that are right, checked by running the Task they make."""

from __future__ import annotations

import textwrap

import pytest

from stitch_lsp.task.comment_grammar import parse
from stitch_lsp.task.selection import prepare
from stitch_lsp.task.shapes import comment_template
from stitch_lsp.settings import Settings

SRC = textwrap.dedent('''
    import math
    from dataclasses import dataclass

    import torch
    import torch.nn as nn
    from torch.nn import functional as F


    @dataclass
    class Conf:
        n_embd: int = 768
        n_head: int = 12
        bias: bool = True
        dropout: float = 0.1


    class Attn(nn.Module):
        def __init__(self, config):
            super().__init__()
            self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd, bias=config.bias)
            self.n_head = config.n_head
            self.n_embd = config.n_embd

        def forward(self, x):
            B, T, C = x.size()
            q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
            k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
            q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
            return q, k


    def scores(x, T):
        bsz, seqlen, _ = x.shape
        y = x.view(bsz, seqlen, 4, -1).transpose(1, 2)
        z = F.softmax(y[:, :, :T, :] * 0.5, dim=-1)
        return z
    ''').lstrip()


def _line(needle: str) -> int:
    return next(i for i, l in enumerate(SRC.splitlines()) if needle in l)


def test_scalars_config_objects_and_tensors():
    c = parse("B=8, T=256, eps=1e-5, flash=False, n_head=12, x=[B,T,4*n_head] bf16, config.n_embd=768", SRC)
    assert not c.problems
    assert c.tensors["x"] == ((8, 256, 48), "bfloat16")
    assert c.values["T"] == "256" and c.values["eps"] == "1e-05" and c.values["flash"] == "False"
    assert c.values["config"] == "types.SimpleNamespace(n_embd=768)"


def test_config_object_is_evaluated_against_the_files_own_class():
    c = parse("config=Conf(n_embd=256, n_head=4)", SRC)
    assert not c.problems
    assert c.values["config"] == "types.SimpleNamespace(n_embd=256, n_head=4, bias=True, dropout=0.1)"
    bad = parse("config=Conf(n_emb=256)", SRC)
    assert bad.problems == ["`# stitch:` Conf in this file has no field `n_emb` (in `config=Conf(n_emb=256)`)"]


@pytest.mark.parametrize("text,names", [
    ("x=[8,1024", "x=[8,1024"), ("x=[8,1024] fp99", "fp99"), ("1024.n_embd=3", "1024.n_embd"),
    ("config=1024.n_embd", "1024.n_embd"), ("T=", "T="), ("x=[B,8] float32", "'B'"), ("just words", "just words"),
    ("c=Conf(3)", "c=Conf(3)"), ("c=Conf(**kw)", "c=Conf(**kw)"), ("c=Conf(n_embd=f(1))", "n_embd=f(1)"),
    ("a='open", "'open"), ("x=(((((", "x=((((("), ("=1", "`` is not a name"),
])
def test_malformed_entries_are_one_line_problems_that_name_the_token(text, names):
    c = parse(text, SRC)
    assert c.problems and all("\n" not in p for p in c.problems)
    assert any(names in p for p in c.problems), c.problems


def test_a_malformed_comment_reaches_the_user_as_one_line_not_a_traceback():
    lines = SRC.splitlines()
    at = _line("z = F.softmax")
    lines.insert(at, "    # stitch: x=[B,T,C] float32, T=1024.n_embd")
    p = prepare("\n".join(lines), "m.py", at + 1, at + 1, Settings())
    assert p.task is None and "1024.n_embd" in p.problem and "\n" not in p.problem


def _proposal_runs(source: str, start: int, end: int, comment: str) -> tuple[bool, str]:
    """Insert ``comment`` above the selection and run the Task it makes (CPU): (ran, why not)."""
    import torch

    lines = source.splitlines()
    indent = lines[start][: len(lines[start]) - len(lines[start].lstrip())]
    lines.insert(start, indent + comment.strip())
    p = prepare("\n".join(lines), "m.py", start + 1, end + 1, Settings())
    if p.task is None:
        return False, p.problem
    ns: dict = {}
    try:
        exec(compile(p.task.source, "reference.py", "exec"), ns)
        with torch.no_grad():
            ns["Model"](*ns["get_init_inputs"]())(*ns["get_inputs"]())
    except Exception as exc:  # noqa: BLE001 - the check reports what a wrong proposal does
        return False, f"{type(exc).__name__}: {exc}"
    return True, ""


def _proposal(start: int, end: int) -> str:
    p = prepare(SRC, "m.py", start, end, Settings())
    assert p.task is None and p.missing_shapes
    return comment_template(p.region, p.shapes)


def test_sizes_unpacked_from_x_size_are_ints_and_make_x_three_dimensional():
    start, end = _line("q, k, v = self.c_attn"), _line("q = q.view")
    comment = _proposal(start, end)
    assert "x=[B,T,C] float32" in comment and "B=8" in comment and "T=256" in comment
    assert "B=[" not in comment and "T=[" not in comment and "C=[" not in comment  # ints, not tensors
    assert "config.n_embd=C" in comment and "config=1024" not in comment  # the config object, field by field
    assert _proposal_runs(SRC, start, end, comment) == (True, "")


def test_view_ties_dimensions_and_a_slice_bound_is_an_int():
    start = end = _line("z = F.softmax")
    comment = _proposal(start, end)
    # x.view(bsz, seqlen, 4, -1).transpose(1, 2): y is (bsz, 4, seqlen, a new size); T bounds a slice
    assert "y=[bsz,4,seqlen,D2] float32" in comment and "bsz=8" in comment and "seqlen=256" in comment
    assert "T=256" in comment and "T=[" not in comment
    assert _proposal_runs(SRC, start, end, comment) == (True, "")


@pytest.mark.parametrize("wrong", [
    "# stitch: B2=8, D=1024, x=[B2,D] float32, B=[B2,D] float32, T=[B2,D] float32, C=[B2,D] float32",  # ints as tensors
    "# stitch: B=8, T=256, C=1024, config.n_embd=C, config.n_head=8, x=[B,C] float32",  # wrong rank
])
def test_the_check_fails_a_wrong_proposal(wrong):
    """The mutation check: the check the proposals pass above fails the proposals the tool used to make."""
    start, end = _line("q, k, v = self.c_attn"), _line("q = q.view")
    ran, why = _proposal_runs(SRC, start, end, wrong)
    assert not ran and why
