"""The trial inputs: where they are drawn, and which module sizes a second shape may change."""

from __future__ import annotations

import types

import torch

from stitch_lsp.worker import inputs

SOURCE = """
import torch
M, N = 4096, 1024
HIDDEN: int = 768
SMALL = 4
def get_inputs():
    return [torch.randn(M, N), torch.randn(N, HIDDEN), SMALL]
def get_init_inputs():
    return []
"""


def module_from(source: str) -> types.ModuleType:
    module = types.ModuleType("reference")
    exec(compile(source, "reference.py", "exec"), module.__dict__)
    return module


def test_inputs_are_drawn_on_the_target_device_not_copied_from_the_cpu():
    module = module_from(SOURCE + "\nSEEN = []\n_draw = get_inputs\n"
                         "def get_inputs():\n    SEEN.append(torch.empty(0).device.type)\n    return _draw()\n")
    values = inputs.draw(module, seed=1, device=torch.device("meta"))
    assert module.SEEN == ["meta"]  # allocated there, not on the CPU and then moved
    assert [v.device.type for v in values[:2]] == ["meta", "meta"]
    assert values[2] == 4


def test_same_seed_same_inputs():
    module = module_from(SOURCE.replace("M, N = 4096, 1024", "M, N = 16, 8"))
    a = inputs.draw(module, seed=7, device=torch.device("cpu"))
    b = inputs.draw(module, seed=7, device=torch.device("cpu"))
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])


def test_sizes_from_tuple_and_annotated_assignments_can_change_for_the_second_shape():
    sizes = inputs.size_globals(module_from(SOURCE), SOURCE)
    assert sizes == {"M": 4096, "N": 1024, "HIDDEN": 768}  # SMALL is under 8: left alone


DERIVED = """
import torch
batch = 64
classes = 32
shape = (classes,)
total = batch * classes
def get_inputs():
    return [torch.rand(batch, *shape), torch.randint(0, classes, (batch,))]
"""


def test_values_derived_from_a_size_follow_it_at_the_second_shape_and_come_back():
    module = module_from(DERIVED)
    sizes = inputs.size_globals(module, DERIVED)
    assert sizes == {"batch": 64, "classes": 32}  # shape and total are not sizes get_inputs names directly
    option = inputs.odd_shape_candidates(sizes)[0]
    restore = inputs.with_globals(module, option, DERIVED)
    try:
        logits, targets = inputs.draw(module, seed=3, device=torch.device("cpu"))
        # The class dimension moved with `classes`, so every target indexes a real class.
        assert logits.shape == (option["batch"], option["classes"])
        assert module.total == option["batch"] * option["classes"]
        assert int(targets.max()) < logits.shape[1]
    finally:
        restore()
    assert (module.batch, module.classes, module.shape, module.total) == (64, 32, (32,), 2048)
