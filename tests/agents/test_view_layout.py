"""Where a view's elements lie in the value it was taken from, checked against PyTorch's own strides."""

from __future__ import annotations

import itertools

import pytest

torch = pytest.importorskip("torch")
trace_handler = pytest.importorskip("stitch_lsp.worker.trace_handler")

from stitch_lsp.coders.template.attention.view_layout import in_place_layout, view_strides  # noqa: E402


@pytest.mark.parametrize("old, perm, new", [
    ((2, 3, 4), (0, 1, 2), (6, 4)), ((2, 3, 4), (0, 1, 2), (24,)), ((2, 3, 4), (1, 0, 2), (3, 8)),
    ((2, 3, 4), (0, 2, 1), (2, 12)), ((2, 3, 4), (0, 2, 1), (2, 4, 3, 1)), ((4, 1, 6), (2, 1, 0), (3, 2, 1, 4)),
    ((2, 8, 3, 4), (0, 2, 1, 3), (2, 3, 32)), ((2, 8, 3, 4), (0, 2, 1, 3), (6, 8, 4)),
])
def test_view_strides_are_pytorchs(old, perm, new):
    t = torch.empty(old).permute(*perm)
    try:
        want = list(t.view(new).stride())
    except RuntimeError:
        want = None
    assert view_strides(tuple(t.shape), list(t.stride()), new) == want


SOURCE = '''
import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, x):
        y = x * 2.0
        a, b, c = y.split(8, dim=2)
        return (a.view(2, 5, 2, 4).transpose(1, 2), b.view(2, 5, 2, 4).permute(0, 2, 3, 1),
                c[:, 1:4].unsqueeze(0).squeeze(0), y.select(1, 3), x.transpose(0, 1)[:, :, 8:].transpose(0, 1))

def get_inputs():
    return [torch.randn(2, 5, 24)]

def get_init_inputs():
    return []
'''


def test_every_view_reads_the_elements_pytorch_reads():
    reply = trace_handler.trace_task(SOURCE)
    assert reply.ok, reply.message
    graph = reply.graph
    index = graph.index()
    ns: dict = {}
    exec(compile(SOURCE, "task", "exec"), ns)
    x = torch.randn(2, 5, 24)
    y = x * 2.0
    want = ns["Model"]()(x)
    values = {graph.inputs[0].name: x}
    mul = next(n.name for n in graph.nodes if n.op == "aten.mul.Tensor")
    values[mul] = y
    bases = set()
    for out, expect in zip(graph.outputs, want):
        base, offset, strides = in_place_layout(out, index, graph)
        bases.add(base)
        got = values[base].reshape(-1).as_strided(expect.shape, strides, offset)
        assert torch.equal(got, expect), out
    assert bases == {mul, graph.inputs[0].name}  # every output reads through to the product or to x


def test_a_forward_input_is_read_at_its_traced_strides():
    source = SOURCE.replace("return [torch.randn(2, 5, 24)]", "return [torch.randn(5, 2, 24).transpose(0, 1)]")
    reply = trace_handler.trace_task(source)
    assert reply.ok, reply.message
    (x,) = reply.graph.inputs
    assert x.strides == (24, 48, 1)
    last = reply.graph.outputs[-1]
    base, offset, strides = in_place_layout(last, reply.graph.index(), reply.graph)
    assert (base, offset, strides) == (x.name, 8, (24, 48, 1))


def test_an_expanded_forward_input_keeps_no_strides():
    source = SOURCE.replace("return [torch.randn(2, 5, 24)]", "return [torch.randn(1, 5, 24).expand(2, 5, 24)]")
    reply = trace_handler.trace_task(source)
    assert reply.ok, reply.message
    assert reply.graph.inputs[0].strides == ()  # read row-major: the binding copies it whole first
