"""Small GEMM tasks for the GEMM family's tests, and (run as a script) each one's Triton kernel executed
by Triton's interpreter on the CPU through the generated binding, compared with eager PyTorch.

    TRITON_INTERPRET=1 python tests/agents/gemm_interpret_cases.py OUT_DIR   # writes OUT_DIR/results.json
"""

from __future__ import annotations

import json
import sys
import traceback
import types
from pathlib import Path

TEMPLATE = """
import torch
import torch.nn as nn
import torch.nn.functional as F

DT = torch.{dtype}

class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear({k}, {n}, dtype=DT)
        self.up = nn.Linear({k}, {n}, bias=False, dtype=DT)
        self.w = nn.Parameter(torch.randn({k}, {n}, dtype=DT) / 8)
        self.scale = nn.Parameter(torch.rand({n}, dtype=DT) + 0.5)

    def forward(self, {args}):
        {body}

def get_inputs():
    return [{inputs}]

def get_init_inputs():
    return []
"""


def task(body: str, *, m=64, k=48, n=80, dtype="float32", args="x", inputs=None):
    inputs = inputs or "torch.randn({m}, {k}, dtype=DT)".format(m=m, k=k)
    source = TEMPLATE.format(dtype=dtype, k=k, n=n, args=args, body=body, inputs=inputs)
    from stitch_lsp.pipeline import Task
    from stitch_lsp.worker.trace_handler import trace_task

    reply = trace_task(source)
    assert reply.ok, reply.message
    return Task(name="t", source=source), reply.graph


INTERPRETED = [
    ("gelu_bias_scale_odd_sizes", "return F.gelu(self.lin(x)) * self.scale", dict(m=50, k=40, n=70)),
    ("relu_tf32_off", "return torch.relu(self.lin(x))", {}),
    ("geglu_chunk", "v, g = self.lin(x).chunk(2, dim=-1)\n        return v * F.gelu(g)", dict(n=96)),
    ("swiglu_fp16", "return F.silu(self.lin(x)) * self.up(x)", dict(dtype="float16")),
    ("scaled_residual_fp16", "return r + 0.5 * self.lin(x)",
     dict(dtype="float16", args="x, r", inputs="torch.randn(64, 48, dtype=DT), torch.randn(64, 80, dtype=DT)")),
    ("mish_tanh_softplus_elu", "y = self.lin(x)\n        return F.mish(y) + torch.tanh(y) - F.elu(y) + torch.log1p(y.abs())",
     {}),
    ("row_scale_and_mask", "y = self.lin(x) * s\n        return torch.where(y > 0.1, y, -0.5 * y)",
     dict(args="x, s", inputs="torch.randn(64, 48, dtype=DT), torch.rand(64, 1, dtype=DT)")),
    ("plain_matmul_alpha_beta", "return torch.addmm(self.scale, x, self.w, beta=0.5, alpha=2.0).clamp(-1, 1)", {}),
    ("three_dims_two_outputs", "y = self.lin(x)\n        return y, torch.sigmoid(y)",
     dict(args="x", inputs="torch.randn(4, 16, 48, dtype=DT)")),
    # Row reductions over N, fused when one tile spans a row: softmax, logsumexp, mean / max (not keepdim).
    ("softmax_fp16_in_fp32", "return torch.softmax(self.lin(x).float() * 2.0, dim=-1)", dict(dtype="float16", n=72)),
    ("logsumexp_then_gelu", "return F.gelu(torch.logsumexp(self.lin(x), dim=1, keepdim=True))", {}),
    # Persistent: 3 programs loop over 4 x 3 tiles of 16 x 32, K = 40 in masked steps of 16.
    ("persistent_gelu_bias_odd_sizes", "return F.gelu(self.lin(x)) * self.scale",
     dict(m=50, k=40, n=70, tile=[16, 32, 16, 8, 4, 2, 3])),
    ("persistent_swiglu_fp16", "return F.silu(self.lin(x)) * self.up(x)",
     dict(dtype="float16", tile=[32, 16, 16, 8, 4, 2, 5])),
    ("row_mean_and_max", "y = torch.relu(self.lin(x))\n        return y.mean(dim=-1), y.amax(dim=-1, keepdim=True) - y",
     dict(n=40)),
]




def run_case(body: str, kw: dict) -> dict:
    import torch

    from stitch_lsp.coders.template import candidate_module, lower
    from stitch_lsp.plan.gemm_tiles import GemmOptions

    from stitch_lsp.plan import gemm_tiles

    kw = dict(kw)
    tile = kw.pop("tile", None)
    t, graph = task(body, **kw)
    table_tile = gemm_tiles.table_tile
    if tile is not None:  # the tile a tuning run would have cached
        gemm_tiles.table_tile = lambda spec: list(tile)
    try:
        program = lower(graph, GemmOptions(mode="triton"))
    finally:
        gemm_tiles.table_tile = table_tile
    module = types.ModuleType("candidate")
    exec(compile(candidate_module(t, program), "candidate", "exec"), module.__dict__)
    torch.manual_seed(0)
    model = module.ModelNew()
    inputs = module._reference.get_inputs()
    params = dict(model.named_parameters())
    tensors = [params[gi.path].detach() if gi.role == "param" else inputs[gi.index] for gi in program.graph.inputs]
    # The binding's own interpreter of the program, on CPU tensors (Triton's interpreter runs the kernel).
    got = module._Prepared(module._BAKED)(tensors)
    with torch.no_grad():
        want = module._reference.Model.forward(model, *inputs)
    got, want = (got if isinstance(got, tuple) else (got,)), (want if isinstance(want, tuple) else (want,))
    tol = 1e-4 if kw.get("dtype", "float32") == "float32" else 1e-2
    outputs = []
    for g, w in zip(got, want):
        outputs.append({"shape_ok": g.shape == w.shape, "dtype_ok": g.dtype == w.dtype, "tol": tol,
                        "max_err": float((g.float() - w.float()).abs().max()),
                        "scale": float(w.float().abs().max())})
    return {"error": "", "backends": [k.backend for k in program.kernels], "outputs": outputs}


# A task whose constructor arguments set constants of the graph: the epilogue's scale and a pool's size.
CONSTRUCTOR_TASK = """
import torch
import torch.nn as nn
import torch.nn.functional as F

batch = 24
features = 40
hidden = 96


class Model(nn.Module):
    def __init__(self, features, hidden, pool, scale, bias=True):
        super().__init__()
        self.lin = nn.Linear(features, hidden, bias=bias)
        self.pool = pool
        self.scale = scale

    def forward(self, x):
        y = self.lin(x) * self.scale
        return F.avg_pool1d(y.unsqueeze(1), self.pool).squeeze(1)


def get_inputs():
    return [torch.randn(batch, features)]


def get_init_inputs():
    return [features, hidden, 4, 2.0]
"""
# (constructor arguments, batch): the traced ones, then others (larger sizes, another pool and scale).
CONSTRUCTOR_CALLS = [((40, 96, 4, 2.0), 24), ((41, 99, 5, 3.0), 25)]


def run_constructor_case() -> dict:
    """The fused module built with each argument list, run through its own program (Triton interpreted),
    against the reference built with the same arguments."""
    import torch

    from stitch_lsp.coders.template import candidate_module, lower
    from stitch_lsp.plan.gemm_tiles import GemmOptions
    from stitch_lsp.pipeline import Task
    from stitch_lsp.worker.trace_handler import trace_task

    reply = trace_task(CONSTRUCTOR_TASK)
    assert reply.ok, reply.message
    program = lower(reply.graph, GemmOptions(mode="triton"))
    module = types.ModuleType("candidate")
    exec(compile(candidate_module(Task(name="ctor", source=CONSTRUCTOR_TASK), program), "candidate", "exec"),
         module.__dict__)
    module.load_kernel = _host_kernel  # the pool after the GEMM is a CUDA kernel: built for the host here
    calls = []
    for args, batch in CONSTRUCTOR_CALLS:
        torch.manual_seed(0)
        ref = module._reference.Model(*args)
        torch.manual_seed(0)
        mine = module.ModelNew(*args)
        x = torch.randn(batch, args[0])
        params = dict(mine.named_parameters())
        tensors = [params[gi.path].detach() if gi.role == "param" else x for gi in program.graph.inputs]
        with torch.no_grad():
            data = mine._stitch_fused.data_for(tensors)
            got = module._Prepared(data)(tensors)
            want = ref(x)
        calls.append({"args": list(args), "retraced": mine._stitch_fused is not module._FUSED,
                      "backends": sorted({"triton" if "triton" in s else "torch" for s in data["steps"]}),
                      "shape_ok": got.shape == want.shape, "max_err": float((got - want).abs().max()),
                      "scale": float(want.abs().max())})
    return {"error": "", "calls": calls}


def _host_kernel(source: str, name: str):
    """A generated CUDA kernel built for the host (tests/agents/test_template_pointwise_host.py's g++ shim),
    called as the loader's kernels are: ``kernel(grid, block, inputs + outputs)``."""
    import re
    import tempfile

    from tests.agents import test_template_pointwise_host as host

    outputs = len(re.findall(r"\* __restrict__ out\d+", source.split(name, 1)[1].split(")", 1)[0]))

    def launch(grid, block, args):
        env = {f"a{k}": t for k, t in enumerate(args)}
        inputs, outs = list(env)[:len(args) - outputs], list(env)[len(args) - outputs:]
        step = {"kernel": name, "args": inputs, "grid": grid[0], "block": block[0],
                "outputs": [[o, list(env[o].shape), str(env[o].dtype).replace("torch.", "")] for o in outs]}
        with tempfile.TemporaryDirectory() as tmp:
            host._run_kernel(step, source, env, Path(tmp))
        for k, o in enumerate(outs):
            args[len(inputs) + k].copy_(env[o])

    return launch


def main() -> int:
    out = Path(sys.argv[1])
    results = {}
    for name, body, kw in INTERPRETED:
        try:
            results[name] = run_case(body, kw)
        except Exception:  # noqa: BLE001 - the test reports it
            results[name] = {"error": traceback.format_exc()[-2000:], "backends": [], "outputs": []}
    try:
        results["constructor_args"] = run_constructor_case()
    except Exception:  # noqa: BLE001 - the test reports it
        results["constructor_args"] = {"error": traceback.format_exc()[-2000:], "calls": []}
    (out / "results.json").write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
