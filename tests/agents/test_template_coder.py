"""The template Coder on every bench task: what it covers, and every kernel it writes compiles with nvcc."""

from __future__ import annotations

import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from stitch_lsp.plan.planner import make_plan
from stitch_lsp.coders.template import TemplateCoder, lower
from stitch_lsp.pipeline import Task

REPO = Path(__file__).resolve().parents[2]
TASKS = sorted(p for p in (REPO / "bench" / "tasks").glob("*.py") if not p.name.startswith("_"))
# Tracing every bench task (once, shared) and compiling every kernel take minutes on a busy CPU.
pytestmark = pytest.mark.timeout(1800)


@pytest.fixture(scope="module")
def traced():
    trace_handler = pytest.importorskip("stitch_lsp.worker.trace_handler")
    pytest.importorskip("torch")
    out = {}
    for path in TASKS:
        task = Task(name=path.stem, source=path.read_text())
        reply = trace_handler.trace_task(task.source)
        assert reply.ok, f"{path.stem}: {reply.message}"
        out[path.stem] = (task, reply.graph)
    return out


def test_suite_is_there():
    assert len(TASKS) >= 30


def test_memory_bound_tasks_are_one_kernel(traced):
    """Pointwise chains and normalisations become a single kernel with nothing left in PyTorch."""
    for name in ("pw_activation_zoo_fp32", "pw_rotary_embedding_bf16", "norm_residual_rmsnorm_bf16",
                 "norm_bias_residual_layernorm_fp32", "red_softmax_causal_fp32", "red_logsumexp_fp32",
                 "pw_swiglu_bf16", "pw_geglu_fp32", "norm_groupnorm_silu_bf16", "red_cross_entropy_fp32",
                 "red_sum_middle_dim_fp32", "red_amax_middle_dim_bf16"):
        task, graph = traced[name]
        program = lower(graph)
        assert len(program.kernels) == 1, (name, program.notes)
        assert program.uncovered_ops == [], (name, program.uncovered_ops)


def test_gemm_tasks_take_the_gemm_family_or_keep_cublas_and_fuse_the_epilogue(traced):
    task, graph = traced["gemm_linear_bias_gelu_fp32"]
    program = lower(graph)  # fp32: the GEMM family's 3xTF32 kernel, the epilogue in it
    assert program.uncovered_ops == []
    assert [(k.kind, k.backend) for k in program.kernels] == [("gemm", "triton")]
    from stitch_lsp.plan.gemm_tiles import GemmOptions

    program = lower(graph, GemmOptions(mode="cublas"))
    assert [u.split(" ")[0] for u in program.uncovered_ops] == ["aten.addmm.default"]
    assert len(program.kernels) == 1 and program.kernels[0].kind == "pointwise"


def test_plan_figures_are_the_fewest_bytes(traced):
    task, graph = traced["norm_rmsnorm_fp32"]
    plan = make_plan(task, graph)
    (group,) = [g for g in plan.groups if g.kind == "row_reduction"]
    x = next(i for i in graph.inputs if i.role == "input")
    n = 1
    for d in x.shape:
        n *= d
    weight = next(i for i in graph.inputs if i.role == "param")
    # read x once, read the weight once, write the output once (fp32)
    assert group.bytes_moved == 4 * (2 * n + weight.shape[0])
    assert plan.floor_us == pytest.approx(group.bytes_moved / 3000e3)
    assert plan.predicted_speedup and plan.predicted_speedup > 1.5
    assert plan.eager_bytes > 2 * group.bytes_moved


def test_candidate_module_is_valid_python_with_modelnew(traced):
    task, graph = traced["pw_gelu_scale_fp32"]
    candidate = TemplateCoder().generate(task, make_plan(task, graph))
    compile(candidate.module_source, "candidate", "exec")
    assert "class ModelNew(_reference.Model)" in candidate.module_source
    assert candidate.cuda_sources and candidate.coder == "template"


@pytest.mark.nvcc
@pytest.mark.timeout(1800)
def test_every_generated_kernel_compiles_with_nvcc(traced, tmp_path):
    nvcc = shutil.which("nvcc")
    jobs = []
    for name, (task, graph) in traced.items():
        for spec in lower(graph).kernels:
            if spec.backend != "nvrtc":
                continue  # the GEMM family's Triton kernels: tests/agents/test_gemm_family*.py
            path = tmp_path / f"{name}_{spec.name}.cu"
            path.write_text(spec.source)
            jobs.append(path)
    assert len(jobs) >= 25

    def build(path: Path):
        out = subprocess.run([nvcc, "-arch=sm_90", "-c", "-Xptxas", "-v", "-o", str(path.with_suffix(".o")), str(path)],
                             capture_output=True, text=True, timeout=300)
        return path.name, out.returncode, out.stderr

    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(build, jobs))
    failed = [(n, err[-800:]) for n, rc, err in results if rc != 0]
    assert not failed, failed
    spills = [n for n, rc, err in results if "bytes spill stores" in err and " 0 bytes spill stores" not in err]
    assert not spills, f"register spills in {spills}"


def test_odd_shapes_re_lower_from_the_symbolic_graph(traced):
    """The Verifier's second shape (every size made odd): the same graph lowers for it, scalar and guarded."""
    from stitch_lsp.coders.template.program import program_for
    from stitch_lsp.serde import to_json

    task, graph = traced["norm_rmsnorm_bf16"]
    assert graph.symbolic
    shapes = [tuple(d - 1 if d % 2 == 0 else d for d in i.shape) for i in graph.inputs]
    prog = program_for(to_json(graph), shapes)
    (kernel,) = [s for s in prog["steps"] if "kernel" in s]
    assert kernel["outputs"][0][1] == list(shapes[-1])
    source = prog["sources"][kernel["kernel"]]
    assert "stitch_ldv<1>" in source or "stitch_ld(" in source  # an odd row cannot take 16-byte loads


def test_integer_inputs_keep_their_pointer_type(traced):
    """Cross-entropy's int64 targets: the kernel takes ``long long*`` (32-bit index math is body-only)."""
    task, graph = traced["red_cross_entropy_fp32"]
    (kernel,) = lower(graph).kernels
    signature = kernel.source.split(f"{kernel.name}(", 1)[1].split(")", 1)[0]
    assert "const long long* __restrict__" in signature


def test_every_launch_passes_tensors_of_the_types_its_kernel_declares(traced):
    """What the binding passes (graph dtypes, at the traced and the odd shapes) is what each kernel's
    signature takes, by the runtime loader's own check (an int64 target into ``int*`` fails to launch)."""
    import torch

    from stitch_lsp.coders.template.program import program_data, program_for
    from stitch_lsp.op_graph import ShapeMismatch
    from stitch_lsp.runtime.loader import _POINTEE_DTYPES, kernel_params
    from stitch_lsp.serde import to_json

    wrong = []
    checked = odd_checked = 0
    for name, (task, graph) in traced.items():
        index = graph.index()
        dtypes = {i.name: i.dtype for i in graph.inputs} | {n: index[n].dtype for n in index}
        programs = [program_data(lower(graph))]
        if graph.symbolic:
            odd = [tuple(d - 1 if d % 2 == 0 else d for d in i.shape) for i in graph.inputs]
            try:
                programs.append(program_for(to_json(graph), odd))
                odd_checked += 1
            except ShapeMismatch:
                pass  # a parameter's size is tied to an input's: the task cannot take these shapes
        for prog in programs:
            for step in (s for s in prog["steps"] if "kernel" in s):
                params = kernel_params(prog["sources"][step["kernel"]], step["kernel"])
                passed = [dtypes[a] for a in step["args"]] + [dtype for _, _, dtype in step["outputs"]]
                assert params is not None and len(params) == len(passed), (name, step["kernel"])
                for param, dtype in zip(params, passed):
                    checked += 1
                    if param.kind != "pointer" or getattr(torch, dtype) not in _POINTEE_DTYPES.get(param.base, ()):
                        wrong.append(f"{name}: {param.text} gets a {dtype} tensor")
    assert checked > 100 and odd_checked > 10 and not wrong, wrong


def _kernel_body(source: str, name: str) -> str:
    return source.split(f"{name}(", 1)[1]


def test_sum_of_squares_rounds_where_eager_does(traced):
    """red_sumsq_last_dim_bf16 upcasts first: eager squares and sums in fp32 and returns fp32, so the
    kernel must not round anything to bf16. Without the upcast, eager rounds each square to bf16,
    accumulates in fp32 and rounds the sum to bf16: so must the kernel."""
    from stitch_lsp.worker.trace_handler import trace_task

    task, graph = traced["red_sumsq_last_dim_bf16"]
    (kernel,) = lower(graph).kernels
    body = _kernel_body(kernel.source, kernel.name)
    assert body.startswith("const __nv_bfloat16* __restrict__ in0, float* __restrict__ out0)")
    assert "bfloat16_rn" not in body and "from_float<__nv_bfloat16>" not in body
    assert "float acc" in body

    no_upcast = task.source.replace("        h = x.to(torch.float32)\n", "").replace("(h * h)", "(x * x)")
    assert no_upcast != task.source
    reply = trace_task(no_upcast)
    assert reply.ok, reply.message
    (kernel,) = lower(reply.graph).kernels
    body = _kernel_body(kernel.source, kernel.name)
    assert body.startswith("const __nv_bfloat16* __restrict__ in0, __nv_bfloat16* __restrict__ out0)")
    assert "__float2bfloat16_rn((ld2[0] * ld2[0]))" in body  # each square rounded, as eager's bf16 mul
    assert "float acc" in body and "out0[row] = stitch_from_float<__nv_bfloat16>(acc" in body
