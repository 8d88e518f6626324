"""Every quick fix, applied on its own, removes its finding and leaves code nvcc compiles.

The files in fixable/ hold one instance of each rule that offers a fix (and compile as
they are, but for the legacy shuffle STC011 fixes). All the fixed variants go to nvcc
in one translation unit, each in a namespace of its own, so the check costs one compile.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from stitch_lsp.analysis.cuda_analysis import CudaAnalyzer

from .test_examples_and_fixes import apply_edits

FIXABLE = Path(__file__).parent / "fixable"
_INCLUDE = re.compile(r"^\s*#\s*include\b.*$", re.M)


def variants() -> list[tuple[str, str, str]]:
    """(source name, finding, fixed text) for every finding with a fix."""
    out = []
    for path in sorted(FIXABLE.glob("*.cu")):
        text = path.read_text()
        for f in CudaAnalyzer(path.name).analyze(text).findings:
            if f.fix is not None:
                out.append((path.name, f"{f.code}@{f.range.start.line + 1}", apply_edits(text, f.fix.edits)))
    return out


def test_every_fixable_rule_is_here():
    codes = {v[1].split("@")[0] for v in variants()}
    assert codes >= {"STC001", "STC007", "STC008", "STC009", "STC011", "STC014", "STC015", "STC016", "STC018",
                     "STC019", "STC020"}


@pytest.mark.parametrize("name,where,fixed", variants(), ids=lambda v: v if isinstance(v, str) and "@" in v else "")
def test_the_fix_removes_its_finding(name, where, fixed):
    code, line = where.split("@")
    after = CudaAnalyzer(name).analyze(fixed)
    assert after.parse_ok
    # Edits that add lines above (an #include) move the finding's line: compare by code and
    # count. (One launch check can also cover the launches before it.)
    before = [f for f in CudaAnalyzer(name).analyze((FIXABLE / name).read_text()).findings if f.code == code]
    assert len([f for f in after.findings if f.code == code]) <= len(before) - 1, where


@pytest.mark.nvcc
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not on PATH")
def test_every_fixed_variant_compiles(tmp_path):
    includes: list[str] = []
    bodies = []
    for k, (name, where, fixed) in enumerate(variants()):
        for inc in _INCLUDE.findall(fixed):
            if inc.strip() not in includes:
                includes.append(inc.strip())
        bodies.append(f"// {name}: {where}\nnamespace variant_{k} {{\n{_INCLUDE.sub('', fixed)}\n}}\n")
    source = "\n".join(includes) + "\n" + "".join(bodies)
    src = tmp_path / "fixed.cu"
    src.write_text(source)
    out = subprocess.run(["nvcc", "-c", "-arch=sm_90", "-std=c++17", str(src), "-o", str(tmp_path / "fixed.o")],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-4000:]
