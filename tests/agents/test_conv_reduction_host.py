"""A reduction after a convolution, read in the convolution's channels-last order, checked on the host CPU.

The convolution runs through torch in channels-last (as the binding runs it), the reduction kernel is built
with g++ and run with a host thread per CUDA thread, and the result is compared with eager PyTorch, NaN
inputs included. Cases: a minimum and an argmax over the channels (a row reduction over contiguous
channels in that order), global pools over 2-D and 3-D outputs with and without keepdim (columns whose
neighbours are channels), a per-channel parameter that is not a view, channel counts that are not a
multiple of a chunk. Tails that would write a full-size output transposed, or keep dims in another order,
keep the convolution in NCHW and say why.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from stitch_lsp.coders.template.conv_reduction import physical_index  # noqa: E402
from tests.agents import test_conv_tail_host as conv  # noqa: E402
from tests.agents import test_template_pointwise_host as host  # noqa: E402
from tests.agents import test_template_rows_host as rows  # noqa: E402

pytestmark = [pytest.mark.timeout(900),
              pytest.mark.skipif(host.GXX is None or host.INCLUDE is None, reason="needs g++ and the CUDA headers")]

CASES = {
    # KernelBench's conv + min over the channels + tanh, with 37 channels (rows of 37: one-wide chunks)
    "min-channels-tanh": conv._source(
        "Conv2d(3, 37, 3)", "37, 1, 1", "torch.tanh(torch.min(y * 2.0, dim=1, keepdim=True)[0])",
        "torch.randn(2, 3, 9, 11)"),
    # a per-channel parameter read as it lies (a leaf, not a view), 8 channels: 4-wide chunks
    "amax-channels-parameter": conv._source(
        "Conv2d(3, 8, 3, padding=1)", "8, 1, 1", "torch.amax(y - self.bias, dim=1, keepdim=True)",
        "torch.randn(3, 3, 6, 7)"),
    "argmax-channels": conv._source(
        "Conv2d(2, 6, 3)", "6, 1, 1", "torch.argmax(torch.relu(y + self.bias), dim=1)",
        "torch.randn(2, 2, 7, 8)"),
    # global average pool, the result squeezed to (N, C) after a GELU
    "gelu-global-pool": conv._source(
        "Conv2d(3, 12, 3)", "12, 1, 1",
        "F.adaptive_avg_pool2d(F.gelu(y + self.bias), 1).squeeze(-1).squeeze(-1)", "torch.randn(2, 3, 10, 9)"),
    "conv3d-sum-spatial": conv._source(
        "Conv3d(2, 5, 3)", "5", "y.sum(dim=(2, 3, 4)) * self.bias", "torch.randn(2, 2, 5, 6, 7)"),
    # 8 channels over 8 x 8 positions: the permuted sizes read the same as NCHW's, the order does not
    "min-channels-equal-sizes": conv._source(
        "Conv2d(3, 8, 3)", "8, 1, 1", "torch.amin(torch.sigmoid(y + self.bias), dim=1, keepdim=True)",
        "torch.randn(2, 3, 10, 10)"),
    "conv-transpose-mean-keepdim": conv._source(
        "ConvTranspose2d(4, 16, 3, stride=2)", "16, 1, 1", "torch.mean(y * 0.5, dim=[2, 3], keepdim=True) + self.bias",
        "torch.randn(2, 4, 5, 6)"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_reduction_reads_the_channels_last_output_in_its_order_and_matches_eager(case, tmp_path, monkeypatch):
    program = conv._program(CASES[case])
    seen = conv._transposed(program)
    fmt = "channels_last_3d" if "conv3d" in case else "channels_last"
    assert seen["conv"] == [fmt] and seen["kernels"] == [{"convolution_nobias": fmt}], program.notes
    assert any("the reduction kernel reads it in that order" in n for n in program.notes), program.notes
    monkeypatch.setattr(host, "_driver", rows._driver)
    host.check_against_eager(CASES[case], program, ("random", "nan"), tmp_path)


@pytest.mark.parametrize("tail, why", [
    ("torch.softmax(y + self.bias, dim=1)", "would be written transposed"),
    ("y.sum(dim=2) + 1.0", "keeps dims in another order"),
    ("torch.nn.functional.instance_norm(y + self.bias)", "reshapes a channels-last value"),
])
def test_reductions_that_would_move_their_output_keep_nchw_and_say_why(tail, why):
    program = conv._program(conv._source("Conv2d(3, 5, 3)", "5, 1, 1", tail, "torch.randn(2, 3, 9, 11)"))
    assert conv._transposed(program) == {"conv": [], "kernels": []}
    assert any("cannot read it in channels-last" in n and why in n for n in program.notes), program.notes


@pytest.mark.parametrize("bias_shape, tail, why", [
    # (2, 8, 8, 8): a full-size output would move, though its permuted sizes are the same
    ("8, 1, 1", "torch.softmax(y + self.bias, dim=1)", "would be written transposed"),
    # a (C, H, W) operand with C == H == W: read in channels-last order it would be read across it
    ("8, 8, 8", "torch.amin(y * self.bias, dim=1, keepdim=True)", "would be read across"),
])
def test_layouts_are_judged_by_dims_not_sizes(bias_shape, tail, why, tmp_path, monkeypatch):
    source = conv._source("Conv2d(3, 8, 3)", bias_shape, tail, "torch.randn(2, 3, 10, 10)")
    program = conv._program(source)
    assert conv._transposed(program) == {"conv": [], "kernels": []}
    assert any("cannot read it in channels-last" in n and why in n for n in program.notes), program.notes
    monkeypatch.setattr(host, "_driver", rows._driver)
    host.check_against_eager(source, program, ("random",), tmp_path)


def test_the_rewritten_group_renumbers_the_reduced_dims_and_reshapes_the_bias():
    from stitch_lsp.plan.fusion import split
    from stitch_lsp.coders.template.conv_bias import split_conv_bias
    from stitch_lsp.worker.trace_handler import trace_task

    graph, _ = split_conv_bias(trace_task(CASES["min-channels-tanh"]).graph)
    index = graph.index()
    (group,) = [g for g in split(graph) if g.kind == "col_reduction"]
    new = physical_index(group, index, "convolution_nobias")
    assert new["convolution_nobias"].shape == (2, 7, 9, 37)
    (amin,) = [n for n in group.nodes if index[n].op == "aten.amin.default"]
    assert new[amin].args[1] == [3] and new[amin].shape == (2, 7, 9, 1)
    (bias_view,) = [n for n in group.nodes if index[n].op == "aten.view.default" and index[n].shape == (37, 1, 1)]
    assert new[bias_view].shape == (1, 1, 1, 37)
    assert index["convolution_nobias"].shape == (2, 37, 7, 9)  # the program's own index is left alone


def test_few_rows_side_by_side_keep_nchw_where_its_split_rows_fill_the_gpu():
    """A global pool over a batch of 2 with 128 channels: 256 rows, one block for 32 of them in channels-last
    order, while the NCHW kernel splits its long rows over many blocks."""
    program = conv._program(conv._source("Conv2d(3, 128, 3)", "128, 1, 1", "torch.mean(y, dim=[2, 3])",
                                         "torch.randn(2, 3, 514, 514)"))
    assert conv._transposed(program) == {"conv": [], "kernels": []}
    assert any("in channels-last order its reduction would run" in n for n in program.notes), program.notes
