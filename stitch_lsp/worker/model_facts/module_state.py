"""Tensors a module keeps across calls outside its parameters and buffers, named before tracing.

A recurrent model written as KernelBench's RNN tasks are (``self.hidden = torch.randn(...)`` in
``__init__``, ``self.hidden = self.tanh(self.i2h(combined))`` in ``forward``) keeps its state in a
plain tensor attribute and replaces it on every call. A fused kernel is a function of forward's
inputs, the parameters and the buffers, so such a forward is not something it can stand for; and
tracing it fails deep inside PyTorch (functionalization's "INTERNAL ASSERT FAILED ... mutating a
non-functional tensor", or a fake-tensor assertion), which tells the user nothing. This module
finds the statement from the task's source and says what it is instead.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

import torch


@dataclass
class StateUse:
    cls: str  # the class whose forward it is
    attr: str
    line: int  # in the task's source, 1-based
    statement: str
    assigned: bool  # ``self.attr = ...`` (else only read)


def _uses(source: str) -> list[StateUse]:
    """``self.X`` stored or read in each ``forward`` of the source's classes, in source order."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    lines = source.splitlines()
    found: list[StateUse] = []
    for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
        for fn in cls.body:
            if not isinstance(fn, ast.FunctionDef) or fn.name != "forward" or not fn.args.args:
                continue
            me = fn.args.args[0].arg
            for node in ast.walk(fn):
                if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == me:
                    text = lines[node.lineno - 1].strip() if 0 < node.lineno <= len(lines) else ""
                    found.append(StateUse(cls.name, node.attr, node.lineno, text, isinstance(node.ctx, ast.Store)))
    return sorted(found, key=lambda u: (u.line, not u.assigned))


def _plain_tensor(module: torch.nn.Module, attr: str) -> bool:
    value = module.__dict__.get(attr)
    return isinstance(value, torch.Tensor) and attr not in module._parameters and attr not in module._buffers


def state_problem(model: torch.nn.Module, source: str, reads: bool = False) -> str:
    """Why ``model``'s forward cannot be fused as a function of its inputs because of a tensor it keeps in a
    plain attribute and replaces ("" when there is none); ``reads``: a tensor attribute it only reads counts
    too (asked once tracing has failed: one read for its shape alone traces well)."""
    uses = [u for u in _uses(source) if u.assigned or reads]
    if not uses:
        return ""
    by_class: dict[str, list[torch.nn.Module]] = {}
    for m in model.modules():
        by_class.setdefault(type(m).__name__, []).append(m)
    # An assignment is the clearer thing to name, and of those the last: the step that computes the new state
    # (an earlier one usually moves it to the input's device).
    for use in sorted(uses, key=lambda u: (not u.assigned, -u.line)):
        if not any(_plain_tensor(m, use.attr) for m in by_class.get(use.cls, [])):
            continue
        where = f"{use.cls}.forward, line {use.line}: `{use.statement}`"
        if use.assigned:
            return (f"{where} replaces `self.{use.attr}`, a tensor kept on the module across calls (a recurrent "
                    "state) that is neither a parameter nor a buffer. A fused kernel computes from forward's "
                    f"inputs, parameters and buffers only: pass the state in as an input and return the new one "
                    f"(h0 -> h_n), or select the per-step computation inside the loop")
        return (f"{where} reads `self.{use.attr}`, a tensor attribute that is neither a parameter nor a buffer: "
                f"register it as a buffer (self.register_buffer('{use.attr}', ...)) or pass it in as an input")
    return ""


def plain_trace_error(exc: BaseException) -> str:
    """A tracing failure in the user's terms: PyTorch's internal assertion texts are replaced by what they mean."""
    text = f"{type(exc).__name__}: {exc}"
    if "INTERNAL ASSERT" in text or "non-functional tensor" in text:
        return ("PyTorch's functionalization could not follow an in-place change of a tensor that is not an "
                "input, parameter or buffer (a state kept on the module, or a tensor made outside forward)")
    if "convert all Tensors to FakeTensors" in text:
        return ("forward uses a tensor made outside it that is not a parameter or buffer (a plain tensor "
                "attribute, or a module-level tensor): register it as a buffer or pass it in")
    first = text.splitlines()[0] if text else type(exc).__name__
    return first[:400]
