"""The hazards the rules describe are real: each docs page's Bad example trips
compute-sanitizer on a GPU and its Good example is clean; every bug planted in the rule
fixtures (and in fixable/) that a sanitizer tool can see trips it, and the fixed kernel
(the rule's quick fix applied, or a barrier before the flagged access) does not.

Runs on a machine with an NVIDIA GPU, nvcc and compute-sanitizer:
    PYTHONPATH=. python3 -m pytest -q -m gpu tests/analysis/test_rules_on_gpu.py
The harnesses are also compiled (not run) wherever nvcc is present (`-m nvcc`).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from stitch_lsp.analysis.cuda_analysis import CudaAnalyzer, kernel_at
from stitch_lsp.analysis.cuda_model import KernelInfo
from stitch_lsp.findings import Finding, Position, Range, TextEdit

from .test_examples_and_fixes import apply_edits

DOCS = Path(__file__).resolve().parents[2] / "docs" / "rules"

# rule -> (compute-sanitizer tool, the launch that exercises the docs example)
# STC002 (a barrier under a thread-dependent branch) is not here: it is undefined
# behaviour, but on the H100 (independent thread scheduling) synccheck reported nothing
# for the docs example (bench/results/gpu_checks_h100.md), so no tool run can back it.
CASES = {
    "STC003": ("racecheck", "shift<<<1, 256>>>(x, y);"),
    "STC017": ("racecheck", "tiled_sum<<<1, 256>>>(x, y, 4096);"),
}
HARNESS = """
#include <cuda_runtime.h>
#include <cstdio>
{kernel}
int main() {{
  float *x, *y;
  cudaMalloc(&x, 4096 * sizeof(float));
  cudaMalloc(&y, 4096 * sizeof(float));
  cudaMemset(x, 0, 4096 * sizeof(float));
  {launch}
  cudaError_t err = cudaDeviceSynchronize();
  printf("status %s\\n", cudaGetErrorString(err));
  return 0;
}}
"""


def example(code: str, kind: str) -> str:
    text = (DOCS / f"{code}.md").read_text()
    return re.search(rf"^## {kind}\n\n```cuda\n(.*?)\n```", text, re.S | re.M).group(1)


def build(code: str, kind: str, tmp_path: Path) -> Path:
    return compile_harness(HARNESS.format(kernel=example(code, kind), launch=CASES[code][1]),
                           tmp_path / f"{code}_{kind}")


def compile_harness(source: str, exe: Path, *flags: str) -> Path:
    src = exe.with_suffix(".cu")
    src.write_text(source)
    cmd = ["nvcc", "-std=c++17", "-lineinfo", *flags, "-o", str(exe), str(src)]
    out = subprocess.run([*cmd[:1], "-arch=native", *cmd[1:]], capture_output=True, text=True, timeout=600)
    if out.returncode != 0 and "native" in out.stderr:  # no GPU to ask: pick Hopper
        out = subprocess.run([*cmd[:1], "-arch=sm_90", *cmd[1:]], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-4000:]
    return exe


def sanitize(tool: str, exe: Path, *args: str, flags: tuple[str, ...] = ()) -> tuple[int, str]:
    """(hazards or errors the tool reported, its whole output)."""
    out = subprocess.run(["compute-sanitizer", "--tool", tool, *flags, str(exe), *args], capture_output=True,
                         text=True, timeout=300)
    text = out.stdout + out.stderr
    m = re.search(r"(?:RACECHECK SUMMARY: (\d+) hazards? displayed|ERROR SUMMARY: (\d+) errors?)", text)
    assert m, text
    return int(m.group(1) or m.group(2)), text


def hazards(tool: str, exe: Path) -> int:
    return sanitize(tool, exe)[0]


@pytest.mark.nvcc
@pytest.mark.parametrize("code", sorted(CASES))
def test_harnesses_compile(code, tmp_path):
    build(code, "Bad", tmp_path)
    build(code, "Good", tmp_path)


@pytest.mark.gpu
@pytest.mark.skipif(shutil.which("compute-sanitizer") is None, reason="compute-sanitizer not on PATH")
@pytest.mark.parametrize("code", sorted(CASES))
def test_bad_example_trips_the_sanitizer_and_good_one_does_not(code, tmp_path):
    tool = CASES[code][0]
    assert hazards(tool, build(code, "Bad", tmp_path)) > 0
    assert hazards(tool, build(code, "Good", tmp_path)) == 0


# --- Planted bugs in the rule fixtures -------------------------------------------------

FIXTURES = Path(__file__).parent / "fixtures"
FIXABLE = Path(__file__).parent / "fixable"
# rule -> the compute-sanitizer tool that sees its hazard happen. STC002 is left out for
# the reason given above CASES.
TOOL = {"STC001": "memcheck", "STC019": "memcheck", "STC020": "memcheck",
        "STC003": "racecheck", "STC017": "racecheck"}
# The fix the barrier rules describe: a block barrier right before the flagged access.
BARRIER_RULES = {"STC003", "STC017"}
# memcheck: exactly n elements per buffer (n * n in 2-D), padded by the tool so that one
# past the end is never another buffer, and a grid of one block more than n needs, so a
# thread one past the end exists. racecheck: a grid that covers n exactly.
EXTENT = {("memcheck", False): 1024, ("memcheck", True): 64, ("racecheck", False): 256, ("racecheck", True): 64}
TOOL_FLAGS = {"memcheck": ("--padding", "4096"), "racecheck": ()}
_TWO_D = re.compile(r"\b(?:threadIdx|blockIdx|blockDim)\.y\b")
_INCLUDE = re.compile(r"^\s*#\s*include\b.*$", re.M)
_DEFINE = re.compile(r"^\s*#\s*define\s+(\w+)", re.M)
_INTEGERS = {"int", "unsigned", "unsigned int", "long", "long long", "size_t", "int64_t", "uint32_t", "uint64_t"}
_REALS = {"float", "double"}


@dataclass(frozen=True)
class Planted:
    """One kernel with planted bugs of the rules in TOOL, ready for the harness."""

    source: str                 # the file's name
    kernel: KernelInfo
    codes: tuple[str, ...]      # the findings in it, by rule
    tool: str
    two_d: bool
    bad: str                    # the file as it is
    fixed: str | None           # the file with every finding in the kernel fixed, if each has a fix

    @property
    def id(self) -> str:
        return f"{self.source}:{self.kernel.name}"


def fix_edits(f: Finding, lines: list[str]) -> tuple[TextEdit, ...] | None:
    if f.code in BARRIER_RULES:
        line = f.range.start.line
        at = Position(line, len(lines[line]) - len(lines[line].lstrip()))
        return (TextEdit(Range(at, at), "__syncthreads(); "),)
    return f.fix.edits if f.fix is not None else None


def planted() -> list[Planted]:
    sources = sorted(p for p in FIXTURES.glob("stc*.cu") if p.stem.upper() in TOOL) + sorted(FIXABLE.glob("*.cu"))
    out = []
    for path in sources:
        text = path.read_text()
        lines = text.split("\n")
        analysis = CudaAnalyzer(path.name).analyze(text)
        by_kernel: dict[str, list[Finding]] = {}
        kernels = {}
        for f in analysis.findings:
            k = kernel_at(analysis, f.range.start)
            if f.code in TOOL and k is not None and k.is_global:
                by_kernel.setdefault(k.name, []).append(f)
                kernels[k.name] = k
        for name, findings in by_kernel.items():
            k = kernels[name]
            tools = {TOOL[f.code] for f in findings}
            assert len(tools) == 1, f"{path.name}:{name} mixes hazards of {tools}"
            edits = [fix_edits(f, lines) for f in findings]
            fixed = None if None in edits else apply_edits(text, tuple(e for es in edits for e in es))
            body = "\n".join(lines[k.body_range.start.line:k.body_range.end.line + 1])
            out.append(Planted(path.name, k, tuple(f.code for f in findings), tools.pop(),
                               bool(_TWO_D.search(body)), text, fixed))
    return out


def _argument(param) -> str:
    """The harness's argument for a kernel parameter: a fresh buffer of `count` elements, or n."""
    base = re.sub(r"\b__restrict__\b|\bconst\b", "", param.type_text).replace("*", "").strip()
    if param.is_pointer:
        assert param.type_text.count("*") == 1, f"no harness for `{param.type_text} {param.name}`"
        return f"({param.type_text.replace('__restrict__', '')})buffer(count * sizeof({base}))"
    assert base in _INTEGERS | _REALS, f"no harness for `{param.type_text} {param.name}`"
    return f"({base})n" if base in _INTEGERS else f"({base})1"


def fixture_harness(cases: list[Planted]) -> tuple[str, dict[tuple[str, str], int]]:
    """One translation unit: each distinct text in a namespace of its own, and a main that
    launches the variant its first argument names, over extent n (second argument), with a
    grid that overshoots n (third argument `over`) or covers it exactly.
    Returns the source and (case id, "bad"/"fixed") -> variant number."""
    spaces: dict[str, int] = {}
    includes: list[str] = []
    blocks, launchers, switch = [], [], []
    variants: dict[tuple[str, str], int] = {}
    for case in cases:
        assert not case.kernel.is_template, f"{case.id}: no harness for template kernels"
        for kind, text in (("bad", case.bad), ("fixed", case.fixed)):
            if text is None:
                continue
            if text not in spaces:
                spaces[text] = len(spaces)
                includes += [i.strip() for i in _INCLUDE.findall(text) if i.strip() not in includes]
                undef = "".join(f"#undef {m}\n" for m in dict.fromkeys(_DEFINE.findall(text)))
                blocks.append(f"// {case.source}\nnamespace src{spaces[text]} {{\n{_INCLUDE.sub('', text)}\n}}\n{undef}")
            j = len(variants)
            variants[(case.id, kind)] = j
            args = ", ".join(_argument(p) for p in case.kernel.params)
            shape = ("dim3 block(16, 16); dim3 grid(g, g); size_t count = (size_t)n * n;" if case.two_d else
                     "dim3 block(256); dim3 grid(g); size_t count = n;")
            per = 16 if case.two_d else 256
            launchers.append(f"static void launch{j}(int n, bool over) {{  // {case.id} ({kind})\n"
                             f"  unsigned g = over ? n / {per} + 1 : (n + {per} - 1) / {per};\n"
                             f"  {shape}\n  src{spaces[text]}::{case.kernel.name}<<<grid, block>>>({args});\n}}\n")
            switch.append(f"    case {j}: launch{j}(n, over); break;\n")
    main = ("static void* buffer(size_t bytes) {\n  void* p = nullptr;\n  cudaMalloc(&p, bytes);\n"
            "  cudaMemset(p, 0, bytes);\n  return p;\n}\n" + "".join(launchers) +
            "int main(int argc, char** argv) {\n  if (argc < 4) return 2;\n"
            "  int n = atoi(argv[2]);\n  bool over = argv[3][0] == 'o';\n  switch (atoi(argv[1])) {\n"
            + "".join(switch) + "    default: return 2;\n  }\n  cudaError_t err = cudaDeviceSynchronize();\n"
            "  printf(\"status %s\\n\", cudaGetErrorString(err));\n  return 0;\n}\n")
    head = "\n".join(["#include <cuda_runtime.h>", "#include <cstdio>", "#include <cstdlib>", *includes])
    return head + "\n" + "".join(blocks) + main, variants


PLANTED = planted()


def test_every_planted_hazard_a_sanitizer_can_see_is_exercised():
    # Every finding of the rules in TOOL, in every fixture, has a kernel the GPU test runs;
    # each barrier finding and each finding with a quick fix has a fixed version too.
    found = {(p.source, c) for p in PLANTED for c in p.codes}
    assert {(s, c) for s, c in found if s.startswith("stc")} == {
        (f"{c.lower()}.cu", c) for c in TOOL}
    counted = sum(len(p.codes) for p in PLANTED if p.source.startswith("stc"))
    marked = sum(len(re.findall(rf"/\*!{c}\*/", (FIXTURES / f"{c.lower()}.cu").read_text())) for c in TOOL)
    assert counted == marked
    assert all(p.fixed is not None for p in PLANTED if set(p.codes) <= BARRIER_RULES)


@pytest.mark.parametrize("case", [p for p in PLANTED if p.fixed is not None], ids=lambda p: p.id)
def test_the_fixed_kernel_is_quiet(case):
    # The fix the GPU test proves clean is the one the rule asks for: the rule goes quiet there.
    after = CudaAnalyzer(case.source).analyze(case.fixed)
    left = [f for f in after.findings if f.code in TOOL and (k := kernel_at(after, f.range.start)) is not None
            and k.name == case.kernel.name]
    assert left == []


@pytest.fixture(scope="module")
def fixture_exe(tmp_path_factory):
    source, variants = fixture_harness(PLANTED)
    # -G: no optimisation, so a read the kernel makes before its check is not sunk into it.
    return compile_harness(source, tmp_path_factory.mktemp("planted") / "planted", "-G"), variants


@pytest.mark.nvcc
def test_fixture_harness_compiles(fixture_exe):
    exe, variants = fixture_exe
    assert exe.is_file() and len(variants) >= 2 * len(PLANTED) - sum(p.fixed is None for p in PLANTED)


@pytest.mark.gpu
@pytest.mark.skipif(shutil.which("compute-sanitizer") is None, reason="compute-sanitizer not on PATH")
@pytest.mark.parametrize("case", PLANTED, ids=lambda p: p.id)
def test_planted_bug_trips_the_sanitizer_and_its_fix_does_not(case, fixture_exe):
    exe, variants = fixture_exe
    n = str(EXTENT[(case.tool, case.two_d)])
    grid = "over" if case.tool == "memcheck" else "exact"
    flags = TOOL_FLAGS[case.tool]
    count, text = sanitize(case.tool, exe, str(variants[(case.id, "bad")]), n, grid, flags=flags)
    assert count > 0, f"{case.tool} saw nothing in {case.id} ({', '.join(case.codes)}):\n{text[-3000:]}"
    if case.fixed is not None:
        count, text = sanitize(case.tool, exe, str(variants[(case.id, "fixed")]), n, grid, flags=flags)
        assert count == 0 and "status no error" in text, text[-3000:]


# --- Rule scopes set by the Programming Guide and the sanitizer (scope_cases.py) -------------

from .scope_cases import CASES as SCOPE_CASES  # noqa: E402

SCOPE_HARNESS = """
#include <cuda_runtime.h>
#include <cstdio>
{kernel}
int main() {{
  float *x, *w, *y;
  cudaMalloc(&x, 4096 * sizeof(float));
  cudaMalloc(&w, 1024 * sizeof(float));
  cudaMalloc(&y, 4096 * sizeof(float));
  cudaMemset(x, 0, 4096 * sizeof(float));
  cudaMemset(w, 0, 1024 * sizeof(float));
  cudaMemset(y, 0, 4096 * sizeof(float));
  {launch}
  cudaError_t err = cudaDeviceSynchronize();
  printf("status %s\\n", cudaGetErrorString(err));
  return 0;
}}
"""
SANITIZED_SCOPES = [c for c in SCOPE_CASES if c.tool is not None]


def _scope_exe(case, kind: str, tmp_path: Path) -> Path:
    text = (case.bad if kind == "bad" else case.good).replace("/*!*/", "")
    return compile_harness(SCOPE_HARNESS.format(kernel=text, launch=case.launch), tmp_path / f"{case.name}_{kind}",
                           "-G")


@pytest.mark.nvcc
@pytest.mark.parametrize("case", SANITIZED_SCOPES, ids=lambda c: c.name)
def test_scope_harnesses_compile(case, tmp_path):
    assert _scope_exe(case, "bad", tmp_path).is_file() and _scope_exe(case, "good", tmp_path).is_file()


@pytest.mark.gpu
@pytest.mark.skipif(shutil.which("compute-sanitizer") is None, reason="compute-sanitizer not on PATH")
@pytest.mark.parametrize("case", SANITIZED_SCOPES, ids=lambda c: c.name)
def test_scope_hazard_trips_the_sanitizer_and_its_fix_does_not(case, tmp_path):
    # divergent_barrier: synccheck's "Divergent thread(s) in block"; shared_row_pointer:
    # racecheck's hazard on the neighbour's slot; read_under_ternary: memcheck's invalid
    # read past the 1024 floats of `w` (the grid covers 1280 threads).
    flags = ("--padding", "4096") if case.tool == "memcheck" else ()
    count, text = sanitize(case.tool, _scope_exe(case, "bad", tmp_path), flags=flags)
    print(f"{case.name} bad: {case.tool} reported {count}")
    assert count > 0, f"{case.tool} saw nothing in {case.name}:\n{text[-3000:]}"
    count, text = sanitize(case.tool, _scope_exe(case, "good", tmp_path), flags=flags)
    print(f"{case.name} good: {case.tool} reported {count}")
    assert count == 0 and "status no error" in text, text[-3000:]
