"""What every shape of reduction kernel needs to know about a group: its reductions, the rows they share, the
passes they take (a mean and the variance around it as one), and the floats of partial results each carries."""

from __future__ import annotations

from attrs import define, field

from stitch_lsp.coders.template.emitter import Unsupported
from stitch_lsp.coders.template.kernels import _vec_for
from stitch_lsp.op_graph import OpNode
from stitch_lsp.plan import op_table
from stitch_lsp.plan.fusion import Group, domain, reduction_dims
from stitch_lsp.plan.reduction_domain import Domain


def variance_pairs(reductions: list[str], index: dict[str, OpNode]) -> dict[str, str]:
    """``{r2: r1}`` where r1 = mean(s) and r2 = mean or sum of (s - r1)^2 over the same rows.

    Such a pair is computed in one pass, as (count, mean, M2) per thread merged across the row.
    """
    def ref(arg) -> str | None:
        return arg["$"] if isinstance(arg, dict) and "$" in arg else None

    def through_views(name: str | None) -> str | None:
        while name is not None:
            node = index[name]
            if node.op in ("aten.view.default", "aten.reshape.default", "aten.alias.default",
                           "aten.unsqueeze.default", "aten.squeeze.dim", "aten.squeeze.dims") and \
                    index[ref(node.args[0])].numel == node.numel:
                name = ref(node.args[0])
                continue
            return name
        return None

    pairs: dict[str, str] = {}
    for r2 in reductions:
        n2 = index[r2]
        if op_table.REDUCTION_OPS.get(n2.op) not in ("sum", "mean"):
            continue
        _, sq = reduction_dims(n2, index)
        if sq.op == "aten.mul.Tensor" and ref(sq.args[0]) and ref(sq.args[0]) == ref(sq.args[1]):
            diff = index[ref(sq.args[0])]
        elif sq.op == "aten.pow.Tensor_Scalar" and ref(sq.args[0]) and sq.args[1] == 2:
            diff = index[ref(sq.args[0])]
        else:
            continue
        if diff.op != "aten.sub.Tensor" or len(diff.args) > 2 or diff.kwargs.get("alpha", 1) != 1:
            continue
        r1 = through_views(ref(diff.args[1]))
        if r1 not in reductions or r1 in pairs or op_table.REDUCTION_OPS.get(index[r1].op) != "mean":
            continue
        dims1, src1 = reduction_dims(index[r1], index)
        dims2, _ = reduction_dims(n2, index)
        if src1.name != ref(diff.args[0]) or dims1 != dims2 or src1.shape != sq.shape or index[r1].dtype != "float32":
            continue
        pairs[r2] = r1
    return pairs


@define
class Analysis:
    """What every shape of reduction kernel needs to know about a group."""

    reductions: list[str]
    dom: Domain
    depends: dict[str, set[str]]
    row_nodes: set[str]
    full_outs: list[str]
    row_outs: list[str]
    passes: list[list[str]]
    var_of: dict[str, str]  # r1 (mean) -> r2 (variance around it)
    full_leaves: list[str] = field(factory=list)


def analyse(group: Group, index: dict[str, OpNode]) -> Analysis:
    members = set(group.nodes)
    reductions = [n for n in group.nodes if op_table.classify(index[n].op, index[n].dtype) == "reduction"]
    if not reductions:
        raise Unsupported("no reduction in the group")
    dom = domain(index[reductions[0]], index)
    for r in reductions:
        d = domain(index[r], index)
        if d.key() != dom.key():
            raise Unsupported("reductions over different rows in one group")
        _, src = reduction_dims(index[r], index)
        if src.name not in members and src.name not in group.inputs:
            raise Unsupported("reduction of a value outside the group")
        exact_ints = op_table.REDUCTION_OPS[index[r].op] in op_table.INDEX_REDUCTIONS or index[r].dtype in ("int64", "int32")
        if exact_ints and dom.row_len >= 1 << 24:
            raise Unsupported("a position or a count over rows of 2**24 elements or more (fp32 counts exactly below)")
    rows, numel = dom.rows, dom.numel
    depends: dict[str, set[str]] = {}  # member -> the reductions it depends on
    for n in group.nodes:
        node = index[n]
        deps = set().union(*(depends.get(r, set()) for r in node.refs()))
        if n in reductions:
            deps = deps | {n}
        if deps:
            depends[n] = deps
    row_nodes = set()
    for n in group.nodes:
        if n in depends and index[n].numel != numel:
            if index[n].numel != rows:
                raise Unsupported(f"{n} has {index[n].numel} elements: neither a row nor a row value")
            row_nodes.add(n)
    for o in group.outputs:
        if index[o].numel not in (numel, rows) or (index[o].numel == rows and o not in row_nodes and rows != numel):
            raise Unsupported(f"output {o} is neither a full tensor nor one value per row")
    full_outs = [o for o in group.outputs if o not in row_nodes]
    row_outs = [o for o in group.outputs if o in row_nodes]
    # Passes: reductions that do not depend on one another share a pass (one loop over a streamed
    # row, one barrier); a mean and the variance around it share one as well.
    pairs = variance_pairs(reductions, index)
    passes: list[list[str]] = []
    for r in reductions:
        if r in pairs:
            continue
        deps = depends.get(r, set()) - {r}
        # A reduction's value may feed another's source only through a later pass.
        if passes and not any(d in passes[-1] or pairs.get(d) in passes[-1] for d in deps):
            passes[-1].append(r)
        else:
            passes.append([r])
    var_of = {r1: r2 for r2, r1 in pairs.items()}
    full_leaves = [l for l in group.inputs if index[l].numel == numel]
    return Analysis(reductions, dom, depends, row_nodes, full_outs, row_outs, passes, var_of, full_leaves)


def partial_offsets(rpass: list[str], moments: dict, poss: dict, first: int = 0):
    """Each reduction of a pass with the offset of its partial results and their form: ``moments`` (count, mean,
    M2), ``position`` (value, position as float bits) or ``value``, packed in pass order from ``first``."""
    k = first
    for r in rpass:
        form = "moments" if r in moments else "position" if r in poss else "value"
        yield r, k, form
        k += {"moments": 3, "position": 2, "value": 1}[form]


def partial_slots(a: Analysis, index: dict[str, OpNode], r: str) -> int:
    """Partial-result floats a reduction takes: a (count, mean, M2) triple, a (value, position) pair, or one."""
    if r in a.var_of:
        return 3
    return 2 if op_table.REDUCTION_OPS[index[r].op] in op_table.INDEX_REDUCTIONS else 1


def row_vec(a: Analysis, index: dict[str, OpNode]) -> int:
    identity = [index[l].dtype for l in a.full_leaves] + [index[o].dtype for o in a.full_outs]
    # A chunk stays in one contiguous run of the row (the whole row in the rows layout).
    return _vec_for(identity or ["float32"], a.dom.run if a.dom.layout == "runs" else a.dom.row_len)


def pass_sources(rpass: list[str], index: dict[str, OpNode]):
    """Each reduction of a pass with its kind (``op_table.REDUCTION_OPS``) and the node whose elements it reduces."""
    for r in rpass:
        node = index[r]
        yield r, op_table.REDUCTION_OPS[node.op], reduction_dims(node, index)[1]
