"""A GEMM's activation moved into cuBLASLt's epilogue, where the library computes exactly it.

``addmm(bias, x, w)`` followed by ReLU or tanh-GELU is what ``torch._addmm_activation``
computes in one cuBLASLt call (the bias and the activation applied to the accumulator
before the store), so the output is written once instead of written, read back and
written again by an epilogue kernel. Only these two activations qualify: cuBLASLt's
GELU is the tanh form, so an erf GELU stays in a fused kernel rather than be
silently approximated. Where torch cannot take the Lt path (shapes, strides) it
falls back to addmm + the same activation (GELU with approximate="tanh" on CUDA,
whichever path), the reference's own two steps.
"""

from __future__ import annotations

import json

from attrs import evolve

from stitch_lsp.op_graph import OpGraph, OpNode

ADDMM = "aten.addmm.default"
FUSED = "aten._addmm_activation.default"
_DTYPES = {"float32", "float16", "bfloat16"}


def _activation(node: OpNode) -> bool | None:
    """``use_gelu`` for an activation cuBLASLt applies exactly; None for any other op."""
    if node.op in ("aten.relu.default", "aten.relu_.default"):
        return False
    if node.op in ("aten.gelu.default", "aten.gelu_.default"):
        args, kw = node.args, node.kwargs
        approximate = kw.get("approximate", args[1] if len(args) > 1 else "none")
        return True if approximate == "tanh" else None
    return None


def _plain_addmm(node: OpNode, index: dict[str, OpNode]) -> bool:
    args, kw = node.args, node.kwargs
    if len(args) != 3 or any(kw.get(k, 1) != 1 for k in ("beta", "alpha")) or set(kw) - {"beta", "alpha"}:
        return False
    if not all(isinstance(a, dict) and "$" in a for a in args):
        return False
    bias, mat1, mat2 = (index.get(a["$"]) for a in args)
    if bias is None or mat1 is None or mat2 is None or len(node.shape) != 2:
        return False
    # The Lt epilogue takes a bias vector over the output's columns.
    return tuple(bias.shape) == (node.shape[1],) and len(mat1.shape) == 2 and node.dtype in _DTYPES


def fold_library_epilogues(graph: OpGraph) -> tuple[OpGraph, list[str]]:
    """The graph with each qualifying addmm + activation pair as one ``_addmm_activation``."""
    index = graph.index()
    users = graph.users()
    outputs = set(graph.outputs)
    folded: dict[str, OpNode] = {}  # activation name → its replacement
    dropped: set[str] = set()
    notes: list[str] = []
    for node in graph.nodes:
        if node.op != ADDMM or node.name in outputs or len(users.get(node.name, [])) != 1:
            continue
        act = index[users[node.name][0]]
        use_gelu = _activation(act)
        if use_gelu is None or act.refs() != [node.name] or act.dtype != node.dtype or not _plain_addmm(node, index):
            continue
        folded[act.name] = evolve(act, op=FUSED, args_json=node.args_json,
                                  kwargs_json=json.dumps({"use_gelu": use_gelu}))
        dropped.add(node.name)
        notes.append(f"{node.name} + {act.name}: bias and {'tanh-GELU' if use_gelu else 'ReLU'} "
                     "in cuBLASLt's epilogue (torch._addmm_activation)")
    if not folded:
        return graph, []
    nodes = [folded.get(n.name, n) for n in graph.nodes if n.name not in dropped]
    return evolve(graph, nodes=nodes), notes
