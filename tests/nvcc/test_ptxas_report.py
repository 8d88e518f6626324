"""ptxas' verbose report (real output in tests/fixtures/nvcc) → per-kernel resources."""

from __future__ import annotations

from pathlib import Path

from stitch_lsp.analysis.cuda_analysis import analyze_cuda
from stitch_lsp.findings import Severity
from stitch_lsp.verify.nvcc import NvccOutcome
from stitch_lsp.verify.nvcc_check import check_from_outcome, hint_label
from stitch_lsp.verify.ptxas_report import base_name, match_kernel, parse_ptxas, split_signature

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "nvcc"


def report(name: str):
    return parse_ptxas((FIX / f"{name}.stderr").read_text() + (FIX / f"{name}.stdout").read_text())


def test_every_entry_function_with_its_figures():
    r = report("clean")
    by = {k.mangled: k for k in r.kernels}
    assert set(by) == {
        "_ZN3ops3addEPKfS1_Pfi", "_Z5tiledILi256EEvPf", "_Z5scalePddi", "_Z5scalePffi", "_Z14softmax_kernelPKfPfi",
    }
    soft = by["_Z14softmax_kernelPKfPfi"]
    assert (soft.name, soft.registers, soft.shared_bytes, soft.stack_bytes, soft.spill_stores) == (
        "softmax_kernel", 18, 128, 0, 0,
    )
    assert by["_Z5tiledILi256EEvPf"].shared_bytes == 1024 and by["_Z5tiledILi256EEvPf"].name == "tiled"
    assert by["_ZN3ops3addEPKfS1_Pfi"].name == "add"
    assert r.arch == "sm_90"
    assert r.demangled["_Z5scalePffi"] == "scale(float*, float, int)"


def test_spills_and_stack():
    heavy = next(k for k in report("spill").kernels if k.name == "heavy")
    assert (heavy.registers, heavy.spill_stores, heavy.spill_loads, heavy.stack_bytes) == (32, 1924, 3116, 1576)
    assert hint_label(heavy) == "⟨32 regs · 0 B smem · spills 1.9 KB st / 3.0 KB ld · 1.5 KB stack⟩"


def test_ptxas_error_names_its_function():
    r = report("too_much_shared")
    assert len(r.errors) == 1
    assert r.errors[0].function == "_Z3hogPf"
    assert "uses too much shared data" in r.errors[0].message


def test_nvrtc_style_log_with_unmangled_names():
    # NVRTC (--ptxas-options=-v) prints the same "ptxas info" lines; extern "C" names are not mangled.
    log = (
        "ptxas info    : 0 bytes gmem\n"
        "ptxas info    : Compiling entry function 'fused_gelu' for 'sm_90a'\n"
        "ptxas info    : Function properties for fused_gelu\n"
        "    8 bytes stack frame, 4 bytes spill stores, 4 bytes spill loads\n"
        "ptxas info    : Used 40 registers, used 1 barriers, 4096 bytes smem, 368 bytes cmem[0]\n"
    )
    (k,) = parse_ptxas(log).kernels
    assert (k.name, k.mangled, k.registers, k.shared_bytes, k.constant_bytes) == ("fused_gelu", "fused_gelu", 40, 4096, 368)
    assert (k.stack_bytes, k.spill_stores, k.spill_loads) == (8, 4, 4)


def test_signatures():
    assert split_signature("void tiled<256>(float*)") == ("tiled", ["float*"])
    assert split_signature("ops::add(float const*, float const*, float*, int)")[0] == "ops::add"
    assert base_name("void ns::k<std::pair<int, int> >(float*)") == "k"


def test_overloads_map_to_their_own_definition():
    src = (FIX / "src" / "clean.cu").read_text()
    analysis = analyze_cuda(src, "clean.cu")
    scales = [k for k in analysis.kernels if k.name == "scale"]
    assert len(scales) == 2
    f = match_kernel("scale(float*, float, int)", analysis.kernels)
    d = match_kernel("scale(double*, double, int)", analysis.kernels)
    assert f is not d
    assert "float" in f.params[0].type_text and "double" in d.params[0].type_text


def test_resources_placed_on_kernels_and_ptxas_error_on_its_kernel():
    src = (FIX / "src" / "too_much_shared.cu").read_text()
    r = report("too_much_shared")
    outcome = NvccOutcome(status="failed", ptxas=r, arch="sm_90")
    check = check_from_outcome(outcome, analyze_cuda(src, "t.cu"), "t.cu", src)
    err = [f for f in check.findings if f.code == "ptxas"]
    assert len(err) == 1 and err[0].severity is Severity.ERROR
    assert err[0].range.start.line == 1  # __global__ void hog(...)
    assert "hog(float*)" in err[0].message
    # The kernel that failed gets no figures hint; the one that compiled does.
    assert [h.position.line for h in check.hints] == [8]


def test_spill_warning_on_the_kernel():
    src = (FIX / "src" / "spill.cu").read_text()
    outcome = NvccOutcome(status="ok", ptxas=report("spill"), arch="sm_90")
    check = check_from_outcome(outcome, analyze_cuda(src, "s.cu"), "s.cu", src)
    spills = [f for f in check.findings if f.code == "ptxas-spill"]
    assert len(spills) == 1 and spills[0].severity is Severity.WARNING
    assert spills[0].range.start.line == 1 and "1924 bytes stored" in spills[0].message
