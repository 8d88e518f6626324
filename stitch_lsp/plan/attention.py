"""Attention written out by hand, recognised as what it is: one ``scaled_dot_product_attention`` call.

Pure and fast (no torch), like the rest of planning. The pattern, as model code writes it and
tracing spells it (MinGPT's causal self-attention, most hand-written transformer blocks):

    scores = (q @ k.transpose(-2, -1)) * scale       # a batched GEMM over (batch, heads), then a scale
    scores = scores.masked_fill(mask == 0, -inf)      # optional: a causal mask (a registered tril buffer,
                                                      # or a tril / triu of ones made in forward)
    probs = softmax(scores, dim=-1)                   # (dropout in eval: nothing)
    out = probs @ v                                   # the second batched GEMM

becomes ``scaled_dot_product_attention(q, k, v, is_causal=..., scale=scale)`` on the 4-D (batch,
heads, sequence, head size) tensors the reference had before it flattened them for the GEMMs.
The head reshapes and transposes around it stay views, the projections stay GEMMs, and whatever
pointwise or normalisation work surrounds the block is fused by the Coder as everywhere else.

Exactness: softmax(q·kᵀ·scale + M)·v with M = 0 where kept and -inf where masked is the very
function SDPA computes for ``is_causal`` (its mask is the top-left lower triangle, the one a tril
buffer sliced from [0, 0] gives); only the order of the floating-point operations differs. In
fp32, PyTorch runs the memory-efficient kernel (3xTF32 products, fp32 accumulation and fp32
softmax) or its math path, so the result is within fp32 rounding of eager's; in bf16 / fp16 the
fused kernels keep the scores and probabilities in fp32 where eager rounds them to the input type,
so they are closer to the float64 answer than eager is (the Verifier's float64 judgement). What is
not exactly this function is left as it was: another mask value than -inf (a row whose scores
all lie below it would differ), a mask that is not a causal triangle, ReLU or another activation
in place of the softmax, attention weights that are also returned, GEMMs that are not batched
over (batch, heads) in 4-D.
"""

from __future__ import annotations

import json
import math
from typing import Any, Callable

from attrs import define, evolve, field

from stitch_lsp.op_graph import GraphInput, OpGraph, OpNode

SDPA = "aten.scaled_dot_product_attention.default"
# softmax(q·kᵀ·scale [+ causal mask]) without the second GEMM: the template Coder's kernel (``fold_attention_probs``)
PROBS = "stitch.attention_probs"
BMM = "aten.bmm.default"
# Same elements in the same (row-major) order: walking through these keeps the logical tensor.
_SAME_ORDER = {"aten.view.default", "aten._unsafe_view.default", "aten.reshape.default", "aten.clone.default",
               "aten.alias.default", "aten.expand.default", "aten.contiguous.default", "aten.detach.default"}
_CONVERT = {"aten._to_copy.default", "prims.convert_element_type.default"}
_INVERT = {"aten.logical_not.default", "aten.bitwise_not.default"}
_SHAPE_KEEPING = {"aten.view.default", "aten._unsafe_view.default", "aten.reshape.default", "aten.unsqueeze.default",
                  "aten.expand.default", "aten.alias.default", "aten.clone.default", "aten.detach.default",
                  "aten._to_copy.default", "prims.convert_element_type.default", "aten.squeeze.dim"}
# Triangle patterns, by which entries are nonzero (true): on and below the diagonal, or strictly above it.
LOWER, STRICT_UPPER = "lower", "strict_upper"
_OTHER = {LOWER: STRICT_UPPER, STRICT_UPPER: LOWER}


@define
class AttentionMatch:
    """One attention block taken as a call of PyTorch's fused attention."""

    node: str  # the scaled_dot_product_attention node added to the graph
    causal: bool
    scale: float
    mask: str  # where the causal mask came from, in words ("" without one)
    shape: tuple[int, ...]  # (batch, heads, sequence, head size) of the output
    dtype: str
    folded: list[str] = field(factory=list)  # the op names it replaces, in graph order

    def describe(self) -> str:
        mask = f", causal mask ({self.mask})" if self.causal else ""
        b, h, t, d = self.shape if len(self.shape) == 4 else (0, 0, 0, 0)
        return (f"attention {b}x{h} heads, {t} positions, head size {d}: scores GEMM, scale {self.scale:.6g}{mask}, "
                f"softmax, second GEMM -> scaled_dot_product_attention(is_causal={self.causal}, "
                f"scale={self.scale:.6g})")


def _num(v: Any) -> Any:
    """A scalar argument as it is in the JSON (a number or a symbolic float), else None."""
    if isinstance(v, bool):
        return None
    if isinstance(v, (int, float)):
        return v
    if isinstance(v, dict) and "symf" in v:
        return v
    return None


def _hint(v: Any) -> float:
    return float(v["hint"]) if isinstance(v, dict) else float(v)


class _Graph:
    def __init__(self, graph: OpGraph) -> None:
        self.graph = graph
        self.index = graph.index()
        self.users = graph.users()
        self.inputs = {i.name: i for i in graph.inputs}
        self.raw = {n.name: json.loads(n.args_json) for n in graph.nodes}

    def node(self, name: Any) -> OpNode | None:
        return self.index.get(name) if isinstance(name, str) else None

    def ref(self, node: OpNode, i: int = 0) -> str | None:
        args = self.raw.get(node.name, [])
        a = args[i] if i < len(args) else None
        return a.get("$") if isinstance(a, dict) else None

    def same_tensor_chain(self, name: str) -> list[str]:
        """``name`` and the values it was made from by order-keeping reshapes (view, clone, identity expand):
        the same logical tensor, latest first."""
        chain = [name]
        node = self.index[name]
        while node.op in _SAME_ORDER:
            src = self.node(self.ref(node))
            if src is None or src.numel != node.numel:
                break  # an expand that broadcasts: another tensor
            chain.append(src.name)
            node = src
        return chain

    def four_d(self, name: str, last: tuple[int, ...], batch: int) -> str | None:
        """The earliest 4-D value in ``name``'s chain whose last two sizes are ``last`` and whose first two
        multiply to ``batch`` (the (batch, heads, ...) tensor before it was flattened for a bmm)."""
        found = None
        for n in self.same_tensor_chain(name):
            shape = self.index[n].shape
            if len(shape) == 4 and tuple(shape[2:]) == last and shape[0] * shape[1] == batch:
                found = n
        return found


def _scale_of(g: _Graph, node: OpNode) -> tuple[Any, str] | None:
    """(the scale as JSON, the value it scales) for ``x * c``, ``c * x`` or ``x / c``."""
    raw = g.raw[node.name]
    if len(raw) != 2:
        return None
    if node.op == "aten.mul.Tensor":
        for i in (0, 1):
            c, x = _num(raw[1 - i]), raw[i]
            if c is not None and isinstance(x, dict) and "$" in x:
                return c, x["$"]
    if node.op == "aten.div.Tensor":
        c, x = _num(raw[1]), raw[0]
        if c is not None and isinstance(x, dict) and "$" in x and _hint(c) != 0:
            if isinstance(c, dict):
                return {"symf": f"1.0/({c['symf']})", "hint": 1.0 / _hint(c)}, x["$"]
            return 1.0 / c, x["$"]
    return None


def _dims_last(node: OpNode, rank: int) -> bool:
    args = node.args
    dims = args[1] if len(args) > 1 else None
    dims = [dims] if isinstance(dims, int) else dims
    return isinstance(dims, list) and len(dims) == 1 and dims[0] % rank == rank - 1 and (len(args) > 2 and args[2])


def _softmax_input(g: _Graph, probs: str) -> tuple[str, list[str]] | None:
    """The scores a softmax over the last dimension was taken of (our decomposition's
    ``exp(x - amax(x)) / sum(exp(...))``, with fp32 conversions around it for half types), and its nodes."""
    nodes = []
    p = g.index[probs]
    if p.op in _CONVERT:
        nodes.append(p.name)
        p = g.node(g.ref(p))
        if p is None:
            return None
    if p.op != "aten.div.Tensor":
        return None
    e, s = g.node(g.ref(p, 0)), g.node(g.ref(p, 1))
    if e is None or s is None or e.op != "aten.exp.default" or s.op != "aten.sum.dim_IntList":
        return None
    rank = len(e.shape)
    if g.ref(s) != e.name or not _dims_last(s, rank):
        return None
    d = g.node(g.ref(e))
    if d is None or d.op != "aten.sub.Tensor":
        return None
    x, m = g.node(g.ref(d, 0)), g.node(g.ref(d, 1))
    if x is None or m is None or m.op != "aten.amax.default" or g.ref(m) != x.name or not _dims_last(m, rank):
        return None
    nodes += [p.name, s.name, e.name, d.name, m.name]
    if x.op in _CONVERT:
        nodes.append(x.name)
        x = g.node(g.ref(x))
        if x is None:
            return None
    return x.name, nodes


def _triangle(g: _Graph, name: str | None, depth: int = 0) -> tuple[str, str] | None:
    """(LOWER or STRICT_UPPER: which entries of every trailing 2-D slab are nonzero, where it came from)
    for a mask value, when that is known from the graph alone or from a buffer's traced values."""
    if name is None or depth > 16:
        return None
    if name in g.inputs:
        gi: GraphInput = g.inputs[name]
        return (gi.triangle, f"buffer {gi.path}") if gi.triangle in (LOWER, STRICT_UPPER) else None
    node = g.index[name]
    args = node.args
    if node.op in ("aten.tril.default", "aten.triu.default"):
        src = g.node(g.ref(node))
        k = args[1] if len(args) > 1 else 0
        full = src is not None and src.op == "aten.full.default" and _num(src.args[1] if len(src.args) > 1 else None)
        if not full or _hint(src.args[1]) == 0:
            return None
        if node.op == "aten.tril.default" and k == 0:
            return LOWER, "tril of ones made in forward"
        if node.op == "aten.triu.default" and k == 1:
            return STRICT_UPPER, "triu(1) of ones made in forward"
        return None
    if node.op in _COMPARE:
        return _index_triangle(g, node)
    if node.op == "aten.where.self":
        # where(cond, c1, c0) with constants: nonzero where cond holds when c1 != 0 == c0 (tril's decomposition).
        raw = g.raw[node.name]
        cond = raw[0].get("$") if isinstance(raw[0], dict) else None
        a, b = _constant(g, raw[1]), _constant(g, raw[2])
        if cond is None or tuple(g.index[cond].shape[-2:]) != tuple(node.shape[-2:]):
            return None  # a condition broadcast over the rows or columns is no triangle
        found = _triangle(g, cond, depth + 1)
        if found is None or a is None or b is None or (a == 0) == (b == 0):
            return None
        return (found[0] if b == 0 else _OTHER[found[0]]), found[1]
    if node.op == "aten.slice.Tensor":
        src = g.node(g.ref(node))
        if src is None:
            return None
        dim = (args[1] if len(args) > 1 else 0) % max(1, len(src.shape))
        start = args[2] if len(args) > 2 else 0
        step = args[4] if len(args) > 4 else 1
        if dim >= len(src.shape) - 2 and (start not in (0, None) or step != 1):
            return None  # a slab that does not start at the diagonal's corner
        return _triangle(g, src.name, depth + 1)
    if node.op in _SHAPE_KEEPING:
        src = g.node(g.ref(node))
        if src is None or len(src.shape) < 2 or tuple(src.shape[-2:]) != tuple(node.shape[-2:]):
            return None
        return _triangle(g, src.name, depth + 1)
    if node.op in ("aten.eq.Scalar", "aten.ne.Scalar") and len(args) > 1 and _num(args[1]) == 0:
        found = _triangle(g, g.ref(node), depth + 1)
        if found is None:
            return None
        return (_OTHER[found[0]] if node.op == "aten.eq.Scalar" else found[0]), found[1]
    if node.op in _INVERT:
        found = _triangle(g, g.ref(node), depth + 1)
        return (_OTHER[found[0]], found[1]) if found else None
    return None


_COMPARE = {"aten.ge.Scalar", "aten.gt.Scalar", "aten.le.Scalar", "aten.lt.Scalar"}


def _constant(g: _Graph, value: Any) -> float | None:
    """A number, or a tensor filled with one (``full`` / ``scalar_tensor``), as a float."""
    v = _num(value)
    if v is not None:
        return _hint(v)
    node = g.node(value.get("$")) if isinstance(value, dict) else None
    if node is None or node.op not in ("aten.scalar_tensor.default", "aten.full.default"):
        return None
    args = node.args
    fill = args[0] if node.op == "aten.scalar_tensor.default" else (args[1] if len(args) > 1 else None)
    return _hint(fill) if _num(fill) is not None else None


def _arange_along(g: _Graph, name: str | None, dim: int) -> bool:
    """``name`` is ``arange(0, n)`` (step 1) laid along dimension ``dim`` (-2: rows vary, -1: columns vary)
    of a 2-D index grid: ``arange(n).unsqueeze(-1)`` varies down the rows."""
    node = g.node(name)
    if node is None or node.op != "aten.unsqueeze.default" or len(node.shape) != 2:
        return False
    src = g.node(g.ref(node))
    if src is None or not src.op.startswith("aten.arange"):
        return False
    args = src.args
    start = args[0] if src.op != "aten.arange.default" and len(args) > 1 else 0
    step = args[2] if src.op == "aten.arange.start_step" and len(args) > 2 else 1
    varies = 0 if node.shape[1] == 1 else 1  # (n, 1): varies down the rows; (1, n): along the columns
    return start == 0 and step == 1 and varies == (0 if dim == -2 else 1)


def _index_triangle(g: _Graph, node: OpNode) -> tuple[str, str] | None:
    """``(j - i) >= 1`` and the like, as tril / triu decompose: j the column index, i the row index."""
    diff = g.node(g.ref(node))
    k = _num(node.args[1]) if len(node.args) > 1 else None
    if diff is None or diff.op != "aten.sub.Tensor" or k is None:
        return None
    if not (_arange_along(g, g.ref(diff, 0), -1) and _arange_along(g, g.ref(diff, 1), -2)):
        return None
    k = _hint(k)
    above = {"aten.ge.Scalar": k == 1, "aten.gt.Scalar": k == 0}.get(node.op, False)
    on_or_below = {"aten.le.Scalar": k == 0, "aten.lt.Scalar": k == 1}.get(node.op, False)
    if above:
        return STRICT_UPPER, "a triangle of ones made in forward"
    if on_or_below:
        return LOWER, "a triangle of ones made in forward"
    return None


def _minus_inf(g: _Graph, value: Any) -> bool:
    v = _num(value)
    if v is not None:
        return _hint(v) == -math.inf
    node = g.node(value.get("$")) if isinstance(value, dict) else None
    if node is None or node.op not in ("aten.scalar_tensor.default", "aten.full.default"):
        return False
    args = node.args
    fill = args[0] if node.op == "aten.scalar_tensor.default" else (args[1] if len(args) > 1 else None)
    return _num(fill) is not None and _hint(fill) == -math.inf


def _mask(g: _Graph, scores: str) -> tuple[str, bool, str, list[str]] | str:
    """(the unmasked scores, causal, where the mask came from, the masking nodes); a string: why a mask
    that is there cannot be taken."""
    node = g.index[scores]
    if node.op != "aten.where.self":
        return scores, False, "", []
    raw = g.raw[node.name]
    cond = raw[0].get("$") if isinstance(raw[0], dict) else None
    if _minus_inf(g, raw[1]) and isinstance(raw[2], dict) and "$" in raw[2]:
        masked_when, kept = STRICT_UPPER, raw[2]["$"]
    elif _minus_inf(g, raw[2]) and isinstance(raw[1], dict) and "$" in raw[1]:
        masked_when, kept = LOWER, raw[1]["$"]
    else:
        return "the masked value is not -inf"
    cond_node = g.node(cond)
    if cond_node is None or len(cond_node.shape) < 2 or tuple(cond_node.shape[-2:]) != tuple(node.shape[-2:]):
        # A mask broadcast over the rows or columns (one row of the triangle for every row) is no causal mask.
        return "the mask is not a causal triangle the plan can prove (a tril buffer or a tril / triu of ones)"
    tri = _triangle(g, cond)
    if tri is None:
        return "the mask is not a causal triangle the plan can prove (a tril buffer or a tril / triu of ones)"
    if tri[0] != masked_when:
        return "the mask keeps the upper triangle (not causal)"
    return kept, True, tri[1], [node.name]


def _scores(g: _Graph, probs: str, n: int, t: int, s: int) -> dict | str | None:
    """What the (batch, heads, t, s) probabilities ``probs`` are a softmax of, when that is
    ``softmax(q @ kᵀ · scale [+ causal mask])``: q, k, the scale, the mask and the nodes in between (``interior``,
    ``probs`` excluded); a string says why a softmax over a GEMM's scores is not taken; None when ``probs`` is no
    such softmax."""
    soft = _softmax_input(g, probs)
    if soft is None:
        return None
    scores, soft_nodes = soft
    masked = _mask(g, scores)
    if isinstance(masked, str):
        return f"attention-like block not taken: {masked}"
    unmasked, causal, mask_from, mask_nodes = masked
    scaled = g.index[unmasked]
    scale, raw_flat = 1.0, unmasked
    found = _scale_of(g, scaled)
    if found is not None:
        scale, raw_flat = found
    chain = g.same_tensor_chain(raw_flat)
    bmm1 = g.node(chain[-1])
    if bmm1 is None or bmm1.op != BMM or tuple(bmm1.shape) != (n, t, s):
        return "attention-like block not taken: the scores are not one batched GEMM scaled by a constant"
    d = g.index[g.ref(bmm1, 0)].shape[-1]
    q = g.four_d(g.ref(bmm1, 0), (t, d), n)
    kt = g.four_d(g.ref(bmm1, 1), (d, s), n)
    if q is None or kt is None:
        return "attention-like block not taken: q, k and v are not 4-D (batch, heads, sequence, head size) tensors"
    kt_node = g.index[kt]
    k = None
    if kt_node.op == "aten.permute.default" and list(kt_node.args[1]) in ([0, 1, 3, 2], [0, 1, -1, -2]):
        k = g.ref(kt_node)
    elif kt_node.op == "aten.transpose.int" and sorted(x % 4 for x in kt_node.args[1:3]) == [2, 3]:
        k = g.ref(kt_node)
    if k is None or tuple(g.index[k].shape) != (*g.index[q].shape[:2], s, d):
        return "attention-like block not taken: the scores GEMM does not read k transposed in its last two dimensions"
    if causal and t != s:
        return "attention-like block not taken: q, k and v differ in batch or heads, or a causal mask is not square"
    interior = (set(soft_nodes) | set(mask_nodes) | {unmasked} | set(chain)) - {probs}
    return {"q": q, "k": k, "causal": causal, "scale": scale, "mask": mask_from, "interior": interior}


def _read_outside(g: _Graph, interior: set[str], also: tuple[str, ...] = ()) -> bool:
    """Whether a value inside a block is returned or read by a node outside it (other than ``also``)."""
    outputs = set(g.graph.outputs)
    return any(name in outputs or any(u not in interior and u not in also for u in g.users.get(name, []))
               for name in interior)


def _match_one(g: _Graph, bmm2: OpNode) -> tuple[dict, list[str]] | str | None:
    """The attention ending at ``bmm2`` (probs @ v): the SDPA call's parts and the nodes it replaces; a
    string says why a softmax-then-GEMM is not taken; None when this bmm is not attention at all."""
    probs_flat, v_flat = g.ref(bmm2, 0), g.ref(bmm2, 1)
    if probs_flat is None or v_flat is None or len(bmm2.shape) != 3:
        return None
    n, t, dv = bmm2.shape
    s = g.index[v_flat].shape[1]
    probs = g.four_d(probs_flat, (t, s), n)
    if probs is None:
        return None
    parts = _scores(g, probs, n, t, s)
    if parts is None or isinstance(parts, str):
        return parts
    v = g.four_d(v_flat, (s, dv), n)
    if v is None:
        return "attention-like block not taken: q, k and v are not 4-D (batch, heads, sequence, head size) tensors"
    qs, vs = g.index[parts["q"]].shape, g.index[v].shape
    if tuple(vs[:2]) != tuple(qs[:2]):
        return "attention-like block not taken: q, k and v differ in batch or heads, or a causal mask is not square"
    # Interior values must be read only inside the block (attention weights that are also returned stay).
    probs_chain = g.same_tensor_chain(probs_flat)
    interior = set(probs_chain[: probs_chain.index(probs) + 1]) | parts.pop("interior")
    if _read_outside(g, interior, (bmm2.name,)):
        return "attention-like block not taken: its scores or probabilities are also read elsewhere"
    parts.update(v=v, dtype=bmm2.dtype, shape=(*qs[:3], vs[3]))
    return parts, sorted(interior | {bmm2.name}, key=list(g.index).index)


def fold_attention(graph: OpGraph) -> tuple[OpGraph, list[AttentionMatch], list[str]]:
    """``graph`` with each attention block as one ``scaled_dot_product_attention`` node; the blocks taken;
    and why attention-like blocks (a softmax between two batched GEMMs) were not."""
    g = _Graph(graph)
    matches: list[AttentionMatch] = []
    misses: list[str] = []
    replaced: dict[str, OpNode] = {}  # bmm2 name -> the SDPA node that takes its place
    aliases: dict[str, OpNode] = {}  # a view of bmm2's output back to 4-D -> an alias of the SDPA node
    folded_names: set[str] = set()
    taken = {n.name for n in graph.nodes}
    for node in graph.nodes:
        if node.op != BMM or node.name in folded_names:
            continue
        found = _match_one(g, node)
        if found is None:
            continue
        if isinstance(found, str):
            if found not in misses:
                misses.append(found)
            continue
        parts, folded = found
        name = _fresh(f"{node.name}_sdpa", taken)
        q, v = g.index[parts["q"]], g.index[parts["v"]]
        exprs = (q.shape_expr[:3] + v.shape_expr[3:]) if q.shape_expr and v.shape_expr else []
        sdpa = OpNode(name=name, op=SDPA,
                      args_json=json.dumps([{"$": parts["q"]}, {"$": parts["k"]}, {"$": parts["v"]}, None, 0.0,
                                            parts["causal"]]),
                      kwargs_json=json.dumps({"scale": parts["scale"]}),
                      shape=tuple(parts["shape"]), dtype=parts["dtype"], shape_expr=exprs)
        replaced[node.name] = sdpa
        folded_names.update(folded)
        for user in g.users.get(node.name, []):
            u = g.index[user]
            if u.op in ("aten.view.default", "aten._unsafe_view.default", "aten.reshape.default") \
                    and tuple(u.shape) == sdpa.shape:
                aliases[user] = evolve(u, op="aten.alias.default", args_json=json.dumps([{"$": name}]),
                                       kwargs_json="{}")
        matches.append(AttentionMatch(node=name, causal=parts["causal"], scale=_hint(parts["scale"]),
                                      mask=parts["mask"], shape=sdpa.shape, dtype=sdpa.dtype,
                                      folded=[g.index[f].op for f in folded]))
    if not matches:
        return graph, [], misses
    nodes: list[OpNode] = []
    for n in graph.nodes:
        if n.name in replaced:
            sdpa = replaced[n.name]
            nodes.append(sdpa)
            # The second GEMM's (batch * heads, T, D) output, for readers other than a view back to 4-D.
            nodes.append(evolve(n, op="aten.view.default",
                                args_json=json.dumps([{"$": sdpa.name}, _shape_arg(n)]), kwargs_json="{}"))
        elif n.name in aliases:
            nodes.append(aliases[n.name])
        else:
            nodes.append(n)
    return _without_dead(evolve(graph, nodes=nodes)), matches, misses


def fold_attention_probs(graph: OpGraph, takes: Callable[[OpNode, OpGraph], bool]
                         ) -> tuple[OpGraph, dict[str, str]]:
    """``graph`` with each ``softmax(q @ kᵀ · scale [+ causal mask])`` whose probabilities are not read by a
    second GEMM that ``fold_attention`` took (they are returned, as in nanoGPT's attention cut before ``@ v``,
    or read besides) as one ``stitch.attention_probs`` node (args q, k, causal; kwarg scale), where ``takes``
    (the Coder's kernel) accepts it; and each node taken with its description, in graph order. The node keeps the probabilities'
    name, so their readers read it. Exactness is the written code's: the same scores, mask and softmax,
    computed in fp32, the masked entries exactly 0."""
    g = _Graph(graph)
    replaced: dict[str, OpNode] = {}
    folded: set[str] = set()
    taken: dict[str, str] = {}
    for node in reversed(graph.nodes):
        if node.name in folded or len(node.shape) != 4:
            continue
        b, h, t, s = node.shape
        parts = _scores(g, node.name, b * h, t, s)
        if not isinstance(parts, dict) or _read_outside(g, parts["interior"], (node.name,)):
            continue
        q = g.index[parts["q"]]
        probs = evolve(node, op=PROBS, args_json=json.dumps([{"$": parts["q"]}, {"$": parts["k"]}, parts["causal"]]),
                       kwargs_json=json.dumps({"scale": parts["scale"]}))
        if tuple(q.shape[:2]) != (b, h) or not takes(probs, graph):
            continue
        replaced[node.name] = probs
        folded |= parts["interior"]
        mask = f", causal mask ({parts['mask']})" if parts["causal"] else ""
        taken[node.name] = (f"attention probabilities {b}x{h} heads, {t} queries x {s} keys, head size "
                            f"{q.shape[3]}: scores GEMM, scale {_hint(parts['scale']):.6g}{mask}, softmax -> one "
                            f"kernel of our own that reads q and k and writes the probabilities once")
    if not replaced:
        return graph, {}
    nodes = [replaced.get(n.name, n) for n in graph.nodes]
    return _without_dead(evolve(graph, nodes=nodes)), dict(reversed(list(taken.items())))


def _shape_arg(node: OpNode) -> list[Any]:
    exprs = node.shape_expr or [str(d) for d in node.shape]
    return [d if e.lstrip("-").isdigit() else {"sym": e, "hint": d} for e, d in zip(exprs, node.shape)]


def _fresh(base: str, taken: set[str]) -> str:
    name, i = base, 1
    while name in taken:
        name, i = f"{base}_{i}", i + 1
    taken.add(name)
    return name


def _without_dead(graph: OpGraph) -> OpGraph:
    """The nodes something still reads (outputs, and what they read), plus in-place updates of inputs."""
    live = set(graph.outputs)
    keep: list[OpNode] = []
    for n in reversed(graph.nodes):
        if n.name in live or n.op == "aten.copy_.default":
            keep.append(n)
            live.update(n.refs())
    return evolve(graph, nodes=list(reversed(keep)))


def attention_flops(node: OpNode, index: dict[str, OpNode]) -> int:
    """The two GEMMs' multiply-adds of an attention call (half of them under a causal mask, which the fused
    kernels skip)."""
    refs = node.refs()
    if node.op == PROBS and len(refs) == 2:  # the scores GEMM alone
        q, k = (index[r].shape for r in refs)
        flops = 2 * math.prod(q[:-2]) * q[-2] * k[-2] * q[-1]
        return flops // 2 if len(node.args) > 2 and node.args[2] is True else flops
    if len(refs) < 3:
        return node.numel
    q, k, v = (index[r].shape for r in refs[:3])
    if len(q) < 2 or len(k) < 2 or len(v) < 1:
        return node.numel
    batch = math.prod(q[:-2])
    flops = 2 * batch * q[-2] * k[-2] * (q[-1] + v[-1])
    args = node.args
    return flops // 2 if len(args) > 5 and args[5] is True else flops


def plan_note(match: AttentionMatch) -> str:
    """What the plan says about an attention block it took: which runs it, and why that is exact."""
    b, h, t, d = match.shape if len(match.shape) == 4 else (0, 0, 0, 0)
    mask = " + causal mask" if match.causal else ""
    return (f"{match.describe()}. Runs as one fused attention pass that never writes the {t}x{t} scores: the "
            f"Coder's own attention kernel where it takes the call (fp32 products and softmax, query rows a block "
            f"chosen to fill the GPU), else PyTorch's fused attention (FlashAttention, the memory-efficient kernel "
            f"or cuDNN, as PyTorch picks for this GPU and {match.dtype}); when the Coder's kernel is not faster "
            f"than torch.compile on the GPU at verification, PyTorch's is tried and the faster kept. Exact: the "
            f"same softmax(q·kᵀ·{match.scale:.6g}{mask})·v, only the order of the floating-point operations "
            f"differs (PyTorch's fp32 kernel: 3xTF32 products; bf16 / fp16: scores "
            f"and probabilities kept in fp32, where eager rounds them)")
