"""Every task in bench/tasks/ is a well-formed KernelBench task whose output is
neither constant nor near zero, and depends on its inputs (run on the CPU at the
task's SMALL sizes), and whose full-size shapes are consistent (run on the meta device).
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

TASKS_DIR = Path(__file__).resolve().parents[2] / "bench" / "tasks"
TASK_FILES = sorted(p for p in TASKS_DIR.glob("*.py") if not p.name.startswith("_"))
PREFIXES = ("gemm", "pw", "norm", "red")
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
# Below this a kernel returning zeros would pass a bf16 tolerance (atol ~1e-2).
MIN_MEAN_ABS = 0.05


def load(path: Path, small: bool):
    spec = importlib.util.spec_from_file_location(f"stitch_bench_task_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    if small:
        for name, value in module.SMALL.items():
            assert isinstance(getattr(module, name), int), f"SMALL names {name}, which is not a size constant"
            setattr(module, name, value)
    return module


def run(module, seed: int):
    torch.manual_seed(seed)
    model = module.Model(*module.get_init_inputs())
    inputs = module.get_inputs()
    with torch.no_grad():
        out = model(*inputs)
    return inputs, out


def test_suite_size_and_coverage():
    names = [p.stem for p in TASK_FILES]
    assert len(names) >= 30
    for dtype in DTYPES:
        assert sum(n.endswith("_" + dtype) for n in names) >= 10, dtype
    for prefix in PREFIXES:
        assert sum(n.startswith(prefix + "_") for n in names) >= 4, prefix


@pytest.mark.parametrize("path", TASK_FILES, ids=lambda p: p.stem)
def test_task_metadata_matches_its_name(path):
    module = load(path, small=False)
    prefix, suffix = path.stem.split("_")[0], path.stem.split("_")[-1]
    assert prefix in PREFIXES
    assert module.DTYPE is DTYPES[suffix]
    assert module.LEVEL in (1, 2)
    assert suffix in module.TAGS
    assert ("memory-bound" in module.TAGS) != ("compute-bound" in module.TAGS)
    assert module.__doc__ and len(module.__doc__.strip()) > 40


@pytest.mark.parametrize("path", TASK_FILES, ids=lambda p: p.stem)
def test_full_size_shapes_are_consistent(path):
    """The real sizes build and run shape-wise (meta tensors: no memory, no compute)."""
    module = load(path, small=False)
    with torch.device("meta"):
        model = module.Model(*module.get_init_inputs())
        inputs = module.get_inputs()
        out = model(*inputs)
    assert isinstance(out, torch.Tensor) and out.numel() > 0
    tensors = [*inputs, out, *model.parameters(), *model.buffers()]
    moved = sum(t.numel() * t.element_size() for t in tensors)
    assert moved >= 32 * 2**20, "too small to time meaningfully on a GPU"


@pytest.mark.parametrize("path", TASK_FILES, ids=lambda p: p.stem)
def test_output_is_varied_and_depends_on_the_inputs(path):
    module = load(path, small=True)
    inputs, out = run(module, seed=0)
    # Device-agnostic: plain calls give CPU tensors (KernelBench), the harness moves them.
    assert all(t.device.type == "cpu" for t in inputs)
    assert any(t.dtype == module.DTYPE for t in inputs)
    assert isinstance(out, torch.Tensor) and out.is_floating_point()
    values = out.float()
    assert torch.isfinite(values).all()
    assert values.std().item() > 0.05, "near-constant output"
    assert values.abs().mean().item() > MIN_MEAN_ABS, "near-zero output"
    distinct = torch.unique(values).numel()
    assert distinct > min(20, values.numel() // 2), "output takes only a few values"

    _, out_again = run(module, seed=0)
    assert torch.equal(out, out_again), "not deterministic for a fixed seed"
    _, other = run(module, seed=1)
    change = (other.float() - values).abs().mean().item()
    assert change > 0.1 * values.std().item(), "output barely depends on the seed"


@pytest.mark.parametrize("path", TASK_FILES, ids=lambda p: p.stem)
def test_sizes_are_module_constants_the_harness_can_read(path):
    source = path.read_text()
    for name in load(path, small=False).SMALL:
        assert re.search(rf"^{name}\b.*=|^[A-Z, ]*\b{name}\b[A-Z, ]*=", source, re.M), name
    assert "cuda" not in source and "device=" not in source, "tasks stay device-agnostic"


def test_readme_table_and_index_are_current():
    import subprocess
    import sys

    repo = TASKS_DIR.parents[1]
    done = subprocess.run([sys.executable, str(repo / "bench" / "task_table.py"), "--check"],
                          capture_output=True, text=True, cwd=repo, timeout=120)
    assert done.returncode == 0, done.stderr
