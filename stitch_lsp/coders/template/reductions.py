"""The kernels for a reduction group: which shape of kernel takes it (a column kernel, a row kernel, a team or
a cluster of blocks per row, a lagged kernel, or rows split into parts) and the kernels that shape needs.

The shapes' figures are ``reduction_kernels``' (read through the module, so a sweep or a test that sets one
of its figures steers the choice); the kernels are ``rows/``' (the row and column kernels); the lagged kernel
builds on the row kernel.
"""

from __future__ import annotations

import math

from stitch_lsp.coders.template import reduction_kernels as rk
from stitch_lsp.coders.template.emitter import Unsupported
from stitch_lsp.coders.template.kernels import KernelSpec, pointwise_kernel
from stitch_lsp.coders.template.lagged_kernels import LaggedKernel, lagged_for
from stitch_lsp.coders.template.rows.analysis import analyse, row_vec
from stitch_lsp.coders.template.rows.columns import column_kernel
from stitch_lsp.coders.template.rows.row_kernel import RowKernel
from stitch_lsp.op_graph import OpNode
from stitch_lsp.plan.fusion import Group, split_tail


def reduction_kernels(group: Group, index: dict[str, OpNode], name: str, config: rk.RowConfig | None = None,
                      split: rk.Split | None | bool = True, sm: int = 90) -> list[KernelSpec]:
    """The kernels for a reduction group: one (a block, or on Hopper a cluster, per row), or (split rows) one
    per pass plus one that finishes.

    ``split``: True picks by the shape (``split_for``), False never splits, a Split forces one. ``sm``: the
    target's compute capability (clusters from 90).
    """
    a = analyse(group, index)
    if a.dom.layout == "columns":
        return [column_kernel(group, index, name, a)]
    vec = row_vec(a, index)
    if split is True:
        cfg = config or rk.row_config(a.dom.row_len, vec, a.dom.rows, len(a.full_leaves))
        blocks = math.ceil(a.dom.rows / max(1, cfg.block // cfg.threads))
        # Bulk copies stage fp32 parts of contiguous rows (Hopper's TMA, from compute capability 9.0).
        team = rk.team_for(a.dom.rows, a.dom.row_len, vec, leaves=len(a.full_leaves), streamed=cfg.streamed) \
            if (sm >= 90 and config is None and a.dom.layout == "rows"
                and all(index[l].dtype == "float32" for l in a.full_leaves)) else None
        if team is not None:
            return [RowKernel(group, index, name, a, split=team, role="team").build()]
        cluster = rk.cluster_for(a.dom.rows, a.dom.row_len, vec, passes=len(a.passes),
                                 full_outputs=bool(a.full_outs), blocks=blocks, streamed=cfg.streamed,
                                 elem_bytes=4 * len(a.full_leaves)) \
            if sm >= 90 and config is None else None  # shared memory holds fp32, whatever the inputs are
        if cluster is not None:
            return [RowKernel(group, index, name, a, split=cluster, role="cluster").build()]
        if sm >= 90 and config is None and a.dom.layout == "rows":
            lag = lagged_for(a, index, vec, streamed=cfg.streamed)
            if lag is not None:
                return [LaggedKernel(group, index, name, a, lag).build()]
        split = rk.split_for(a.dom.rows, a.dom.row_len, vec, blocks, passes=len(a.passes),
                             full_outputs=bool(a.full_outs), streamed=cfg.streamed)
    if not split:
        return [RowKernel(group, index, name, a, config=config).build()]
    if a.full_outs:
        # The outputs of few long rows: a pointwise kernel over all their elements (every SM busy, no loop)
        # reads the row values the split kernels leave, instead of blocks walking their parts once more.
        parts = split_tail(group, index, rows=a.dom.rows)
        if parts is not None:
            head, tail = parts
            try:
                return (reduction_kernels(head, index, name, split=split, sm=sm)
                        + [pointwise_kernel(tail, index, f"{name}_out")])
            except Unsupported:
                pass
    out = [RowKernel(group, index, f"{name}_p{p}", a, split=split, role="partials", upto=p).build()
           for p in range(len(a.passes))]
    return out + [RowKernel(group, index, name, a, split=split, role="finish").build()]
