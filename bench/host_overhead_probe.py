"""Where a fused module's host time per call goes, against eager's, for bench tasks whose GPU work is short.

On a GPU machine, from the repository root (the carried wheels installed by bench/gpu_env.sh):

    . bench/gpu_env.sh && python3 bench/host_overhead_probe.py bench/tasks/gemm_linear_bias_gelu_erf_bf16.py ...

For each task: eager's and the candidate's host time per call (calls queued without synchronising, fewer than
the launch queue holds), then the candidate's calls under cProfile (the functions with the most own time; the
profiler's overhead inflates each Python call by about the same amount, so read the ranking, not the sums).
"""
from __future__ import annotations

import cProfile
import io
import pstats
import statistics
import sys
import time
import types

import torch

from stitch_lsp.plan.planner import make_plan
from stitch_lsp.coders.template import TemplateCoder
from stitch_lsp.pipeline import Task
from stitch_lsp.worker.trace_handler import trace_task

CALLS = 100  # queued per timing, two or three launches each: well inside the launch queue


def host_us(fn) -> float:
    times = []
    for _ in range(15):
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(CALLS):
            fn()
        times.append((time.perf_counter() - start) / CALLS * 1e6)
    torch.cuda.synchronize()
    return statistics.median(times)


def probe(path: str) -> None:
    src = open(path).read()
    task = Task(name=path, source=src)
    cand_src = TemplateCoder().generate(task, make_plan(task, trace_task(src).graph)).module_source
    ref_mod = types.ModuleType("ref")
    exec(compile(src, "ref", "exec"), ref_mod.__dict__)
    cand_mod = types.ModuleType("cand")
    exec(compile(cand_src, "cand", "exec"), cand_mod.__dict__)
    torch.manual_seed(0)
    ref = ref_mod.Model(*ref_mod.get_init_inputs()).cuda().eval()
    cand = cand_mod.ModelNew(*ref_mod.get_init_inputs()).cuda().eval()
    cand.load_state_dict(ref.state_dict())
    xs = [x.cuda() if isinstance(x, torch.Tensor) else x for x in ref_mod.get_inputs()]
    with torch.no_grad():
        for _ in range(5):
            ref(*xs)
            cand(*xs)
        print(f"== {path}")
        for name, fn in (("eager", lambda: ref(*xs)), ("candidate", lambda: cand(*xs))):
            print(f"{name}: host {host_us(fn):.1f} us/call")
        prof = cProfile.Profile()
        torch.cuda.synchronize()
        prof.enable()
        for _ in range(CALLS):
            cand(*xs)
        prof.disable()
        torch.cuda.synchronize()
        out = io.StringIO()
        pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(18)
        print("\n".join(line for line in out.getvalue().splitlines() if line.strip())[:4000])


if __name__ == "__main__":
    for p in sys.argv[1:]:
        probe(p)
