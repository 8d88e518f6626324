"""Which GEMMs the GEMM kernel family takes, and which of the ops after them become its epilogue.

A graph rewrite, pure and fast (no torch): an ``mm`` / ``addmm`` and the pointwise ops that read its
output element by element become one ``stitch.gemm`` node, which the template Coder lowers to a Triton
kernel (``gemm_triton``). What the rest of the graph still reads from that region (the epilogue's
outputs, or the GEMM's own output when a reduction or an unsupported view needs it) are the new node's
outputs; everything after them is lowered as before (row kernels, pointwise kernels).

Which GEMMs qualify is ``gemm_operands``; which ops join one as its epilogue, ``gemm_epilogue``; the
result, a ``GemmSpec`` stored on the new node, ``gemm_spec``.
"""

from __future__ import annotations

import json
from typing import Callable

from attrs import evolve

from stitch_lsp.plan import op_table
from stitch_lsp.plan.gemm_epilogue import EpilogueFront, grow_epilogue, has_rows
from stitch_lsp.plan.gemm_operands import MatchedGemm, as_gemm
from stitch_lsp.plan.gemm_spec import GEMM_OP, MAX_ACCUMULATORS, EpilogueNode, GemmAcc, GemmSpec, LeafRead
from stitch_lsp.op_graph import OpGraph, OpNode
from stitch_lsp.serde import to_dict



def _needed(front: EpilogueFront, index: dict[str, OpNode], users: dict[str, list[str]], outputs: set[str]) -> list[str]:
    """Epilogue values (and accumulator views) the rest of the graph reads: the kernel's outputs."""
    inside = set(front.nodes) | set(front.acc_views)
    out = []
    for name in list(front.acc_views) + list(front.nodes):
        if name in front.constants:
            continue  # stays in the graph for whoever else reads it
        if name in outputs or any(u not in inside for u in users.get(name, [])):
            out.append(name)
    return out


def _consistent(front: EpilogueFront, needed: list[str], index: dict[str, OpNode]) -> bool:
    """Every output is one [M, N'] tile at the kernel's own positions."""
    width = front.n
    for name in needed:
        shape = index[name].shape
        if width is None:
            width = shape[-1]
        if name in front.rows:
            continue  # one value per row, stored by row
        if not has_rows(shape, front.first.m) or shape[-1] != width:
            return False
        if name in front.acc_views:
            gemm, offset = front.acc_views[name]
            if (gemm, offset) not in front.accs:
                front.accs.append((gemm, offset))
    front.n = width
    return len(front.accs) <= MAX_ACCUMULATORS


def _live(front: EpilogueFront, needed: list[str], index: dict[str, OpNode]) -> list[str]:
    """The epilogue ops the outputs need, in graph order."""
    keep: set[str] = set()
    stack = list(needed)
    while stack:
        name = stack.pop()
        if name in keep or name not in front.nodes:
            continue
        keep.add(name)
        stack.extend(index[name].refs())
    return [n for n in front.nodes if n in keep]


def _spec(front: EpilogueFront, needed: list[str], index: dict[str, OpNode], allow_tf32: bool) -> GemmSpec:
    first = front.first
    precision = ("tf32" if allow_tf32 else "tf32x3") if first.dtype == "float32" else ""
    accs = []
    for gemm, offset in front.accs:
        g = front.gemms[gemm]
        accs.append(GemmAcc(gemm=gemm, b=g.b, b_trans=g.b_trans, b_shape=list(g.b_shape), offset=offset,
                            bias=g.bias, bias_shape=list(g.bias_shape), alpha=g.alpha, beta=g.beta, n_full=g.n))
    acc_of = {}
    for name, (gemm, offset) in front.acc_views.items():
        if (gemm, offset) in front.accs and index[name].shape[-1] == front.n:
            acc_of[name] = front.accs.index((gemm, offset))
    live = _live(front, needed, index)
    reads = {}
    for name in live:
        for r in index[name].refs():
            if r in front.reads:
                base, shape, dtype = front.reads[r]
                reads[r] = LeafRead(base, list(shape), dtype)
    return GemmSpec(
        a=first.a, a_trans=first.a_trans, m=first.m, n=int(front.n), k=first.k, dtype=first.dtype,
        precision=precision, accs=accs, acc_of=acc_of,
        epilogue=[EpilogueNode(n, index[n].op, index[n].args_json, index[n].kwargs_json, list(index[n].shape),
                               index[n].dtype) for n in live],
        reads=reads, outputs=list(needed), output_shapes=[list(index[o].shape) for o in needed],
        output_dtypes=[index[o].dtype for o in needed], constants=[c for c in live if c in front.constants],
        rows=[r for r in live if r in front.rows],
    )


def _gemm_only(g: MatchedGemm, index: dict[str, OpNode], allow_tf32: bool) -> GemmSpec:
    front = EpilogueFront(first=g, gemms={g.name: g}, accs=[(g.name, 0)], acc_views={g.name: (g.name, 0)}, n=g.n)
    return _spec(front, [g.name], index, allow_tf32)


def find_gemm_specs(graph: OpGraph) -> list[GemmSpec]:
    """Each GEMM the family could take, with the largest epilogue it can fuse (no policy applied)."""
    index = graph.index()
    users = graph.users()
    outputs = set(graph.outputs)
    gemms = {n.name: g for n in graph.nodes if (g := as_gemm(n, index)) is not None}
    taken: set[str] = set()
    specs = []
    for node in graph.nodes:
        g = gemms.get(node.name)
        if g is None or node.name in taken or not users.get(node.name) and node.name not in outputs:
            continue
        front = grow_epilogue(g, graph, index, gemms, taken)
        needed = _needed(front, index, users, outputs)
        ok = bool(needed) and _consistent(front, needed, index)
        absorbed = {gemm for gemm, _ in front.accs} | {g.name}
        # A GEMM read outside the epilogue must be one of the outputs (stored whole).
        for gemm in absorbed:
            if any(u not in front.nodes and u not in front.acc_views for u in users.get(gemm, [])) \
                    and gemm not in needed:
                ok = False
        # What the kernel loads must exist before it runs: nothing computed from its own GEMMs.
        if ok and set(front.reads) & _descendants(graph, absorbed):
            ok = False
        spec = _spec(front, needed, index, graph.allow_tf32) if ok else _gemm_only(g, index, graph.allow_tf32)
        taken |= {acc.gemm for acc in spec.accs}
        specs.append(spec)
    return specs


def _descendants(graph: OpGraph, sources: set[str]) -> set[str]:
    out = set(sources)
    for node in graph.nodes:
        if any(r in out for r in node.refs()):
            out.add(node.name)
    return out


def rewrite(graph: OpGraph, specs: list[GemmSpec]) -> OpGraph:
    """The graph with each spec's GEMMs and epilogue replaced by one ``stitch.gemm`` node."""
    index = graph.index()
    removed: set[str] = set()
    added: list[OpNode] = []
    for k, spec in enumerate(specs):
        removed |= ({acc.gemm for acc in spec.accs} | {e.name for e in spec.epilogue} | set(spec.acc_of)) \
            - set(spec.constants)
        args = json.dumps([{"$": name} for name in spec.kernel_inputs()])
        kwargs = json.dumps({"spec": to_dict(spec)})
        if len(spec.outputs) == 1:
            out = index[spec.outputs[0]]
            added.append(OpNode(out.name, GEMM_OP, args, kwargs, out.shape, out.dtype, list(out.shape_expr)))
            continue
        tuple_name = f"stitch_gemm_{k}"
        added.append(OpNode(tuple_name, GEMM_OP, args, kwargs, (), "tuple"))
        for i, name in enumerate(spec.outputs):
            out = index[name]
            added.append(OpNode(name, "getitem", json.dumps([{"$": tuple_name}, i]), "{}", out.shape, out.dtype,
                                list(out.shape_expr)))
    nodes = [n for n in graph.nodes if n.name not in removed] + added
    nodes = _drop_dead_views(nodes, set(graph.outputs))
    return evolve(graph, nodes=_topological(nodes, [n.name for n in graph.nodes]))


def _drop_dead_views(nodes: list[OpNode], outputs: set[str]) -> list[OpNode]:
    """Views nothing reads any more (the transposed weights the GEMMs read in place)."""
    while True:
        used = {r for n in nodes for r in n.refs()} | outputs
        dead = [n for n in nodes if n.name not in used and op_table.classify(n.op, n.dtype) == "view"]
        if not dead:
            return nodes
        gone = {n.name for n in dead}
        nodes = [n for n in nodes if n.name not in gone]


def _topological(nodes: list[OpNode], order: list[str]) -> list[OpNode]:
    """Nodes in an order where each follows what it reads, as close to the original order as possible."""
    position = {name: i for i, name in enumerate(order)}
    by_name = {n.name: n for n in nodes}

    def rank(n: OpNode) -> float:
        if n.name in position:
            return position[n.name]
        return max((position.get(r, -1) for r in n.refs()), default=-1) + 0.5

    pending = sorted(nodes, key=rank)
    done: list[OpNode] = []
    placed: set[str] = set()
    while pending:
        for i, n in enumerate(pending):
            if all(r in placed or r not in by_name for r in n.refs()):
                done.append(n)
                placed.add(n.name)
                pending.pop(i)
                break
        else:  # a cycle cannot arise from a valid spec; keep the rest in order rather than loop
            done.extend(pending)
            break
    return done


def fuse_gemms(graph: OpGraph, choose: Callable[[GemmSpec], GemmSpec | None]) -> tuple[OpGraph, list[GemmSpec]]:
    """Rewrite the GEMMs that ``choose`` takes (it returns the spec with its tile, or None to leave the GEMM
    on cuBLAS). Returns the new graph and the specs taken."""
    chosen = [s for s in (choose(spec) for spec in find_gemm_specs(graph)) if s is not None]
    if not chosen:
        return graph, []
    return rewrite(graph, chosen), chosen
