"""Pairing a handwritten kernel with its reference: the happy path and every way a user gets it wrong."""

from __future__ import annotations

import textwrap
from pathlib import Path

from attrs import frozen

from stitch_lsp.findings import Range
from stitch_lsp.jobs.pairing import default_args, pair_kernels, split_directives, KernelParam
from stitch_lsp.settings import KernelPair

REF = textwrap.dedent(
    """
    import torch
    import torch.nn as nn

    class Model(nn.Module):
        def __init__(self):
            super().__init__()

        def forward(self, x):
            return torch.softmax(x, dim=-1)

    def get_inputs():
        return [torch.randn(64, 1000)]

    def get_init_inputs():
        return []
    """
)


@frozen
class P:
    name: str
    type_text: str
    is_pointer: bool


@frozen
class K:
    """Only what pairing reads of the analysis' KernelInfo."""

    name: str
    range: Range
    name_range: Range
    params: tuple
    is_template: bool = False


def kernels_of(lines: list[str]) -> list[K]:
    out = []
    for i, line in enumerate(lines):
        if "__global__" in line:
            head = line.split("(")[0].split()
            name = head[-1]
            col = line.index(name + "(")
            params = []
            inner = line[line.index("(") + 1: line.rindex(")")]
            for raw in filter(None, (p.strip() for p in inner.split(","))):
                ptype, pname = raw.rsplit(None, 1)
                if pname.startswith("*"):
                    ptype, pname = ptype + "*", pname.lstrip("*")
                params.append(P(pname, ptype, "*" in ptype))
            out.append(K(name, Range.of(i, 0, i + 3, 1), Range.of(i, col, i, col + len(name)), tuple(params)))
    return out


def pair(tmp_path: Path, cu: str, ref: str | None = REF, pyproject=()):
    if ref is not None:
        (tmp_path / "ref").mkdir(exist_ok=True)
        (tmp_path / "ref" / "softmax_ref.py").write_text(ref)
    path = tmp_path / "softmax.cu"
    text = textwrap.dedent(cu).lstrip("\n")
    path.write_text(text)
    lines = text.splitlines()
    return pair_kernels(path, lines, kernels_of(lines), root=tmp_path, pyproject_pairs=pyproject)


def test_comment_pairs_kernel_with_explicit_launch(tmp_path):
    res = pair(tmp_path, """
        // stitch: reference=ref/softmax_ref.py
        // stitch: grid=x.shape[0] block=256 shared=2 * 256 * 4 args=x, out, x.shape[0], x.shape[1]
        __global__ void softmax_kernel(const float* x, float* out, int rows, int cols) {
        }
    """)
    assert res.findings == []
    [p] = res.pairs
    assert p.kernel == "softmax_kernel"
    assert p.reference.forward_params == ("x",)
    assert p.grid == "x.shape[0]" and p.block == "256" and p.shared == "2 * 256 * 4"
    assert p.args == ["x", "out", "x.shape[0]", "x.shape[1]"]
    assert [q.ctype for q in p.params] == ["ptr", "ptr", "i32", "i32"]
    assert p.out == "torch.empty_like(x)"


def test_default_launch_maps_parameters_by_name(tmp_path):
    res = pair(tmp_path, """
        // stitch: reference=ref/softmax_ref.py
        __global__ void relu_kernel(const float* x, float* y, long n) {
        }
    """)
    assert res.findings == []
    [p] = res.pairs
    assert p.args == ["x", "out", "out.numel()"]
    assert p.grid == "cdiv(out.numel(), block)"
    assert [q.ctype for q in p.params] == ["ptr", "ptr", "i64"]


def test_typo_in_key_suggests_the_closest_with_a_fix(tmp_path):
    res = pair(tmp_path, """
        // stitch: refrence=ref/softmax_ref.py
        __global__ void softmax_kernel(const float* x, float* out, int n) {
        }
    """)
    assert res.pairs == []
    [f] = [f for f in res.findings if "refrence" in f.message]
    assert "did you mean `reference`" in f.message
    assert f.range == Range.of(0, 11, 0, 19)
    assert f.fix is not None and f.fix.edits[0].new_text == "reference"
    assert "softmax_kernel" in res.broken


def test_missing_reference_file_is_reported_at_its_path(tmp_path):
    res = pair(tmp_path, """
        // stitch: reference=ref/nope.py
        __global__ void softmax_kernel(const float* x, float* out, int n) {
        }
    """)
    [f] = res.findings
    assert "does not exist" in f.message
    assert f.range == Range.of(0, 21, 0, 32)
    assert res.pairs == []


def test_reference_that_does_not_parse_or_lacks_model(tmp_path):
    res = pair(tmp_path, """
        // stitch: reference=ref/softmax_ref.py
        __global__ void k(const float* x, float* out, int n) {
        }
    """, ref="def broken(:\n")
    assert "does not parse" in res.findings[0].message
    res = pair(tmp_path, """
        // stitch: reference=ref/softmax_ref.py
        __global__ void k(const float* x, float* out, int n) {
        }
    """, ref="def get_inputs():\n    return []\n")
    assert "no `class Model`" in res.findings[0].message


def test_signature_mismatch_names_both_sides(tmp_path):
    res = pair(tmp_path, """
        // stitch: reference=ref/softmax_ref.py args=x, out
        __global__ void softmax_kernel(const float* x, float* out, int rows, int cols) {
        }
    """)
    [f] = res.findings
    assert "signature mismatch" in f.message and "takes 4 parameters" in f.message and "passes 2" in f.message
    assert res.pairs == []


def test_unknown_name_in_launch_expression_suggests_forward_parameter(tmp_path):
    res = pair(tmp_path, """
        // stitch: reference=ref/softmax_ref.py grid=xs.shape[0] args=x, out, x.shape[0], x.shape[1]
        __global__ void softmax_kernel(const float* x, float* out, int rows, int cols) {
        }
    """)
    [f] = res.findings
    assert "`xs`" in f.message and "did you mean `x`" in f.message


def test_unmappable_parameter_says_what_to_write(tmp_path):
    res = pair(tmp_path, """
        // stitch: reference=ref/softmax_ref.py
        __global__ void softmax_kernel(const float* x, float* out, int rows, int cols) {
        }
    """)
    [f] = res.findings
    assert "`rows`, `cols`" in f.message
    assert "// stitch: args=x, out, <rows>, <cols>" in f.message


def test_other_tools_directives_are_left_alone_and_dangling_ones_are_not_mine(tmp_path):
    res = pair(tmp_path, """
        // stitch: ignore STX001
        __global__ void softmax_kernel(const float* x, float* out, int n) {
        }
    """)
    assert res.findings == [] and res.pairs == []


def test_pyproject_pair_with_launch(tmp_path):
    entry = KernelPair(kernel="softmax.cu:softmax_kernel", reference="ref/softmax_ref.py",
                       launch="grid=x.shape[0] args=x, out, x.shape[0], x.shape[1]")
    res = pair(tmp_path, """
        __global__ void softmax_kernel(const float* x, float* out, int rows, int cols) {
        }
    """, pyproject=[entry])
    assert res.findings == []
    [p] = res.pairs
    assert p.origin == "pyproject" and p.grid == "x.shape[0]"


def test_pyproject_pair_naming_a_missing_kernel_suggests_one(tmp_path):
    entry = KernelPair(kernel="softmax.cu:softmax_kernal", reference="ref/softmax_ref.py")
    res = pair(tmp_path, """
        __global__ void softmax_kernel(const float* x, float* out, int n) {
        }
    """, pyproject=[entry])
    assert "did you mean `softmax_kernel`" in res.findings[0].message


def test_binding_file_replaces_launch_keys(tmp_path):
    (tmp_path / "softmax_binding.py").write_text("class ModelNew:\n    pass\n")
    res = pair(tmp_path, """
        // stitch: reference=ref/softmax_ref.py binding=softmax_binding.py
        __global__ void softmax_kernel(const float* x, float* out, int rows, int cols) {
        }
    """)
    assert res.findings == []
    assert res.pairs[0].binding_source.startswith("class ModelNew")


def test_values_with_keyword_arguments_are_not_split():
    [a, b] = split_directives(" out=torch.empty(x.shape, dtype=torch.float16) block=128", 3, 10)
    assert a.key == "out" and a.value == "torch.empty(x.shape, dtype=torch.float16)"
    assert b.key == "block" and b.value == "128"
    assert a.key_range == Range.of(3, 11, 3, 14)


def test_default_args_claims_the_single_leftover_pointer_as_output():
    params = [KernelParam("a", "ptr", "const float*"), KernelParam("dest", "ptr", "float*"), KernelParam("n", "i32", "int")]
    args, _ = default_args(params, ["a"])
    assert args == ["a", "out", "out.numel()"]


def test_pairing_comment_above_no_kernel_is_flagged(tmp_path):
    res = pair(tmp_path, """
        // stitch: reference=ref/softmax_ref.py
        int helper(int a) { return a; }

        __global__ void softmax_kernel(const float* x, float* out, int n) {
        }
    """)
    [f] = res.findings
    assert "not directly above a `__global__` kernel" in f.message and f.range.start.line == 0
    assert res.pairs == []
