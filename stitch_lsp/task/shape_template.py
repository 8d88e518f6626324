"""The ``# stitch:`` template the shape quick fix inserts: shapes that agree with what the selection does.

A template is a starting point the user edits, so it must never propose shapes
the selection cannot run with (``x @ w`` with ``w``'s first dimension other than
``x``'s last). Shapes no source gives are named dimensions with one default
each (``B=8, D=1024, N=1024, x=[B,D] float32, w=[D,N] float32``): the comment
parses as written, and changing ``D`` in one place keeps every shape consistent.

The selection is read statically (``ast``, nothing run): matmuls, linear layers
and norms tie dimensions together, per-channel operands (``b``, ``scale``) get
the last dimension, other operands of an elementwise op get its full shape.
"""

from __future__ import annotations

import ast
import re

from stitch_lsp.analysis.region.data import Region
from stitch_lsp.task.template_dims import Shape, Var
from stitch_lsp.task.template_infer import Infer


def template_shapes(region: Region, known: dict[str, tuple[tuple[int, ...], str]],
                    values: dict[str, str] | None = None) -> tuple[dict[str, int], dict[str, tuple[Shape, str]]]:
    """(named dimensions and their default sizes, each input's shape and dtype) for the template."""
    infer = Infer(region, known, values or {})
    try:
        tree = ast.parse(region.body)
    except SyntaxError:
        tree = ast.Module(body=[], type_ignores=[])
    # What runs before the selection in the function: which inputs are sizes, how dimensions tie.
    for text in region.prelude:
        try:
            before = ast.parse(text).body
        except SyntaxError:
            continue
        infer.find_ints(ast.Module(body=before, type_ignores=[]))
        for stmt in before:
            infer.statement(stmt)
    for name in list(infer.free):
        if isinstance(infer.locals.get(name), list):
            infer.assign(name, infer.locals[name])
    infer.locals.clear()
    infer.find_ints(tree)
    for stmt in tree.body:
        infer.statement(stmt)
    for name in list(infer.free):
        infer.assign(name, infer.default_shape())
    shapes = {n: ([infer.render(d) for d in infer.shapes[n]], infer.dtypes.get(n, infer.float_dtype))
              for n in region.inputs if n in infer.shapes}
    used = {w for s, _ in shapes.values() for d in s if isinstance(d, str) for w in re.findall(r"[A-Za-z_][\w.]*", d)}
    symbols = {v.name: v.size for v in infer.vars if v.name in used and v not in infer.bound}
    for name, var in infer.param_vars.items():  # config fields used as sizes: after the sizes they equal
        if "." in name:
            d = infer.render(var)
            symbols[name] = d if d != name else var.size
    for name in region.inputs:  # an int input: its size (the dimension it names, or the number it equals)
        if name in infer.ints:
            d = infer.render(infer.ints[name])
            root = infer.find(infer.ints[name])
            symbols[name] = d if isinstance(d, int) else symbols.get(d, root.size if isinstance(root, Var) else 256)
    return symbols, shapes
