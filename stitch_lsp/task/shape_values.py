"""The values a shape source writes: dtype names and their spellings, integer size expressions (``dim*4``).
Shared by the shape sources (``shapes``) and the quick fix's template (``shape_template``)."""

from __future__ import annotations

import ast

DTYPES = {"float32": "float32", "fp32": "float32", "float": "float32", "f32": "float32",
          "float16": "float16", "fp16": "float16", "half": "float16", "f16": "float16",
          "bfloat16": "bfloat16", "bf16": "bfloat16", "float64": "float64", "double": "float64",
          "int64": "int64", "long": "int64", "int32": "int32", "int": "int32", "bool": "bool"}


def int_value(node: ast.AST, env: dict[str, int]) -> int | None:
    """An integer expression of names and ``+ - * //`` (``dim*4``), or None."""
    if isinstance(node, ast.Expression):
        node = node.body
    if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.Name):
        return env.get(node.id)
    if isinstance(node, ast.BinOp):
        a, b = int_value(node.left, env), int_value(node.right, env)
        ops = {ast.Add: int.__add__, ast.Sub: int.__sub__, ast.Mult: int.__mul__, ast.FloorDiv: int.__floordiv__}
        fn = ops.get(type(node.op))
        if a is None or b is None or fn is None or (b == 0 and isinstance(node.op, ast.FloorDiv)):
            return None
        return fn(a, b)
    return None
