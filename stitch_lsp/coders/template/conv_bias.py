"""A convolution's bias moved into the kernel that follows it.

cuDNN's convolution does not add the bias: eager PyTorch adds it with a kernel of its own, a whole read and
write of the output. Where the output goes on to a fused kernel, the convolution runs without its bias and
``output + bias`` (the bias viewed per channel) becomes that kernel's first op, as eager computes it, so the
output is read once.
"""

from __future__ import annotations

import json

from attrs import evolve

from stitch_lsp.op_graph import OpGraph, OpNode

CONV = "aten.convolution.default"
_DTYPES = {"float32", "float16", "bfloat16"}


def split_conv_bias(graph: OpGraph) -> tuple[OpGraph, list[str]]:
    """The graph with each biased convolution whose output only other ops read split into the convolution
    without bias and an add of the bias (under the convolution's name, so its readers are unchanged)."""
    index = graph.index()
    users = graph.users()
    outputs = set(graph.outputs)
    nodes: list[OpNode] = []
    notes: list[str] = []
    for node in graph.nodes:
        args = json.loads(node.args_json)
        bias_ref = args[2] if node.op == CONV and len(args) > 2 else None
        bias = index.get(bias_ref["$"]) if isinstance(bias_ref, dict) and "$" in bias_ref else None
        if (bias is None or node.name in outputs or not users.get(node.name) or node.dtype not in _DTYPES
                or bias.dtype != node.dtype or len(bias.shape) != 1 or len(node.shape) < 3
                or bias.shape[0] != node.shape[1]):
            nodes.append(node)
            continue
        bare = f"{node.name}_nobias"
        per_channel = f"{node.name}_bias"
        spatial = len(node.shape) - 2
        nodes.append(evolve(node, name=bare, args_json=json.dumps(args[:2] + [None] + args[3:])))
        nodes.append(OpNode(name=per_channel, op="aten.view.default",
                            args_json=json.dumps([bias_ref, [bias.shape[0]] + [1] * spatial]),
                            shape=(bias.shape[0],) + (1,) * spatial, dtype=bias.dtype,
                            shape_expr=[str(bias.shape[0])] + ["1"] * spatial))
        nodes.append(OpNode(name=node.name, op="aten.add.Tensor",
                            args_json=json.dumps([{"$": bare}, {"$": per_channel}]),
                            shape=node.shape, dtype=node.dtype, shape_expr=list(node.shape_expr)))
        notes.append(f"{node.name}: the convolution's bias is added in the kernel that reads its output")
    if not notes:
        return graph, []
    return evolve(graph, nodes=nodes), notes
