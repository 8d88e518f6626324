"""Where the erf-GELU bf16 task's time goes: eager against the fused module (cuBLAS + the fused GELU pass).

On a GPU machine, from the repository root (the carried wheels installed by bench/gpu_env.sh):

    . bench/gpu_env.sh && python3 bench/gemm_erf_probe.py

Prints each side's median time (CUDA events, L2 flushed, interleaved), its host time per call (calls queued
without synchronising), and one profiled call's kernels with their start offsets and the CPU launch times.
"""
import statistics, time, types, sys
import torch
from stitch_lsp.plan.planner import make_plan
from stitch_lsp.coders.template import TemplateCoder
from stitch_lsp.pipeline import Task
from stitch_lsp.worker.trace_handler import trace_task

src = open("bench/tasks/gemm_linear_bias_gelu_erf_bf16.py").read()
reply = trace_task(src)
task = Task(name="erf", source=src)
cand_src = TemplateCoder().generate(task, make_plan(task, reply.graph)).module_source
ref_mod = types.ModuleType("ref"); exec(compile(src, "ref", "exec"), ref_mod.__dict__)
cand_mod = types.ModuleType("cand"); exec(compile(cand_src, "cand", "exec"), cand_mod.__dict__)
torch.manual_seed(0)
ref = ref_mod.Model(*ref_mod.get_init_inputs()).cuda()
cand = cand_mod.ModelNew(*ref_mod.get_init_inputs()).cuda()
cand.load_state_dict(ref.state_dict())
x = ref_mod.get_inputs()[0].cuda()
flush = torch.empty(64 * 1024 * 1024, device="cuda")
fns = {"eager": lambda: ref(x), "cand": lambda: cand(x), "cand_nograd": None}
with torch.no_grad():
    for _ in range(5):
        ref(x); cand(x)
    torch.cuda.synchronize()
    res = {"eager": [], "cand": []}
    for r in range(60):
        for name in ("eager", "cand") if r % 2 else ("cand", "eager"):
            flush.zero_(); torch.cuda.synchronize()
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record(); fns[name](); b.record(); torch.cuda.synchronize()
            res[name].append(a.elapsed_time(b) * 1000)
    for k, v in res.items():
        print(f"{k}: median {statistics.median(v):.1f} us")
    # host time per call (no sync), many calls queued
    for name in ("eager", "cand"):
        torch.cuda.synchronize(); t = time.perf_counter()
        for _ in range(200): fns[name]()
        t1 = time.perf_counter(); torch.cuda.synchronize()
        print(f"{name}: host {1e6 * (t1 - t) / 200:.1f} us/call")
    from torch.profiler import profile, ProfilerActivity
    for name in ("eager", "cand"):
        flush.zero_(); torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as p:
            fns[name](); torch.cuda.synchronize()
        evs = [e for e in p.events() if e.device_type.name == "CUDA"]
        cpu = [e for e in p.events() if e.device_type.name == "CPU"]
        t0 = min(e.time_range.start for e in cpu)
        print(name, "kernels:")
        for e in sorted(evs, key=lambda e: e.time_range.start):
            print(f"   +{e.time_range.start - t0:8.1f} us  {e.time_range.end - e.time_range.start:7.1f} us  {e.name[:90]}")
        launches = sorted((e.time_range.start - t0, e.name) for e in cpu if "LaunchKernel" in e.name or "cuLaunch" in e.name)
        print("   launches at", [round(t, 1) for t, _ in launches])
    out = cand(x); want = ref(x)
    print("max abs diff", (out.float() - want.float()).abs().max().item())
