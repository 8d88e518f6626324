"""Inputs for the trials: seeded draws, clones, adversarial values, a second (odd) shape."""

from __future__ import annotations

import ast
import random
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Callable

import torch

from stitch_lsp.contract.memory_plan import CHUNK_ELEMENTS


def seed_everything(seed: int) -> None:
    torch.manual_seed(seed)
    random.seed(seed)
    try:
        import numpy

        numpy.random.seed(seed % (2**32))
    except ImportError:
        pass


def to_device(value: Any, device: torch.device) -> Any:
    if isinstance(value, torch.Tensor):
        return value.to(device)
    if isinstance(value, (list, tuple)):
        return type(value)(to_device(v, device) for v in value)
    return value


def clone(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.clone()
    if isinstance(value, (list, tuple)):
        return type(value)(clone(v) for v in value)
    return value


def draw(module: ModuleType, seed: int, device: torch.device) -> list[Any]:
    seed_everything(seed)
    # Factory calls without a device (KernelBench's get_inputs) allocate straight on the
    # target: drawing a suite-sized input on the CPU and copying it took seconds per trial.
    with torch.device(device):
        values = module.get_inputs()
    return [to_device(v, device) for v in values]


def tensors(values: list[Any]) -> list[torch.Tensor]:
    return [v for v in values if isinstance(v, torch.Tensor)]


# ------------------------------------------------------------------ adversarial values

ADVERSARIAL_CASES = ("nan", "inf", "denormal", "signed-zero", "large")


def _large_scale(dtype: torch.dtype) -> float:
    return 1e2 if dtype in (torch.float16, torch.bfloat16) else 1e4


def _tiny(dtype: torch.dtype) -> float:
    # Well inside the subnormal range of each type.
    return {torch.float16: 1e-6, torch.bfloat16: 1e-39, torch.float32: 1e-39, torch.float64: 1e-310}.get(dtype, 0.0)


def adversarial(values: list[Any], case: str, seed: int, chunk: int = CHUNK_ELEMENTS) -> list[Any]:
    """``values`` with one kind of hard value planted in every floating tensor, in place.

    ``values`` is a fresh draw that nobody else holds. Positions come from a generator on
    the tensor's own device, slice by slice: the same seed plants the same values (the
    Verifier draws each side's inputs separately), and a 6 GiB input needs no index list
    on the host and no full-size mask.
    """
    out = []
    for i, v in enumerate(values):
        if not isinstance(v, torch.Tensor) or not v.is_floating_point() or v.numel() == 0:
            out.append(v)
            continue
        x = v.detach()
        if not x.is_contiguous():
            x = x.contiguous()
        flat = x.view(-1)
        gen = torch.Generator(device=x.device).manual_seed(seed * 31 + i)
        frac = _special_fraction(x.shape) if case in ("nan", "inf") else 0.25
        for a in range(0, flat.numel(), chunk):
            _plant(flat[a:a + chunk], case, frac, gen)
        if case != "large":  # at least one planted value, however small the tensor
            _plant(flat[seed % flat.numel():][:1], case, 1.0, gen)
        out.append(x)
    return out


def _special_fraction(shape: tuple[int, ...]) -> float:
    """How many NaN / Inf to plant: 1 %, but about one for every two rows along the longest
    dimension, so that a softmax over 393216 columns still has rows without any (a row with
    one is all NaN, and a reference whose output is NaN everywhere proves nothing)."""
    longest = max(shape)
    return min(0.01, 0.5 / longest if len(shape) > 1 else 64 / longest)


def _plant(part: torch.Tensor, case: str, frac: float, gen: torch.Generator) -> None:
    if case == "large":
        part.mul_(_large_scale(part.dtype))
        return
    draw = torch.rand(part.numel(), generator=gen, device=part.device)
    hit = draw < frac
    if case == "nan":
        part.masked_fill_(hit, float("nan"))
    elif case == "inf":
        part.masked_fill_(hit & (draw < frac / 2), float("inf"))
        part.masked_fill_(hit & (draw >= frac / 2), float("-inf"))
    elif case == "denormal":
        part.copy_(torch.where(hit, part * _tiny(part.dtype), part))
    elif case == "signed-zero":
        part.masked_fill_(hit & (draw < frac / 2), -0.0)
        part.masked_fill_(hit & (draw >= frac / 2), 0.0)


# ------------------------------------------------------------------ second shape


@dataclass
class ShapeChange:
    names: dict[str, tuple[int, int]]  # global -> (old, new)

    def describe(self) -> str:
        return ", ".join(f"{k} {a}→{b}" for k, (a, b) in self.names.items())


def _odd(n: int) -> int:
    # Odd, so not a multiple of any power-of-two block or tile size; and larger than n,
    # so a kernel that hard-codes the test size leaves part of the output unwritten
    # (poisoned) instead of silently covering a smaller problem.
    return n + 1 if n % 2 == 0 else n + 2


def size_globals(module: ModuleType, source: str) -> dict[str, int]:
    """Module-level ``NAME = <int>`` used by get_inputs / get_init_inputs, with values >= 8."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return {}
    used: set[str] = set()
    for fn_name in ("get_inputs", "get_init_inputs"):
        fn = getattr(module, fn_name, None)
        code = getattr(fn, "__code__", None)
        if code is not None:
            used.update(code.co_names)
    found: dict[str, int] = {}
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        names = [n for t in targets for n in (t.elts if isinstance(t, ast.Tuple) else [t])]
        for t in names:
            if isinstance(t, ast.Name) and t.id in used:
                value = getattr(module, t.id, None)
                if isinstance(value, int) and not isinstance(value, bool) and value >= 8:
                    found[t.id] = value
    return found


_PLAIN_EXPR = (ast.Name, ast.Constant, ast.Tuple, ast.List, ast.BinOp, ast.UnaryOp, ast.Subscript, ast.Slice,
               ast.Load, ast.operator, ast.unaryop, ast.Starred)


def derived_globals(source: str) -> list[tuple[list[str], ast.expr]]:
    """Module-level ``NAME = <expr>`` whose expression is plain data over other names
    (``input_shape = (num_classes,)``, ``dim2 = dim1 * 2``): values that follow from the sizes."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    found = []
    for node in tree.body:
        if not isinstance(node, ast.Assign) or not all(isinstance(n, _PLAIN_EXPR) for n in ast.walk(node.value)):
            continue
        names = [n.id for t in node.targets for n in (t.elts if isinstance(t, ast.Tuple) else [t])
                 if isinstance(n, ast.Name)]
        if names and any(isinstance(n, ast.Name) for n in ast.walk(node.value)):
            found.append((names, node.value))
    return found


def with_globals(module: ModuleType, values: dict[str, int], source: str = "") -> Callable[[], None]:
    """Sets the sizes, and recomputes (from ``source``) the module-level values derived from them,
    as importing the module with those sizes would; the returned function puts everything back."""
    old = {k: getattr(module, k) for k in values}
    for k, v in values.items():
        setattr(module, k, v)
    changed = set(values)
    for names, expr in derived_globals(source):
        uses = {n.id for n in ast.walk(expr) if isinstance(n, ast.Name)}
        if not uses & changed or any(n in values for n in names):
            continue  # unaffected, or a size set explicitly (it wins over its own definition)
        try:
            value = eval(compile(ast.Expression(expr), "<size>", "eval"), vars(module))  # noqa: S307 - the module's own expression
        except Exception:  # noqa: BLE001 - left as it was; get_inputs will say if it matters
            continue
        for name in names:
            old.setdefault(name, getattr(module, name, None))
        if len(names) == 1:
            setattr(module, names[0], value)
        elif isinstance(value, (tuple, list)) and len(value) == len(names):
            for name, part in zip(names, value):
                setattr(module, name, part)
        changed.update(names)

    def restore() -> None:
        for k, v in old.items():
            setattr(module, k, v)

    return restore


def odd_shape_candidates(sizes: dict[str, int]) -> list[dict[str, int]]:
    """All sizes changed at once first, then one at a time (some sizes must divide others)."""
    if not sizes:
        return []
    together = {k: _odd(v) for k, v in sizes.items()}
    options = [together]
    if len(sizes) > 1:
        options += [{k: _odd(v)} for k, v in sorted(sizes.items(), key=lambda kv: -kv[1])]
    return options
