"""Host-side cost per call (small shapes, so the GPU is never the bottleneck) of eager, torch.compile, candidate.

    python3 bench/host_overhead.py TASK [TASK ...]    # on a GPU machine, from the repository root

Pick tasks whose SMALL sizes keep the traced graph's size equalities (a fused module refuses
others with ShapeMismatch). Prints microseconds per call and a cProfile of the first candidate.
"""

import sys, time, cProfile, pstats, io, torch
from pathlib import Path
sys.path.insert(0, '.'); sys.path.insert(0, 'bench')
from stitch_lsp.plan.planner import make_plan
from stitch_lsp.coders.template import TemplateCoder
from stitch_lsp.pipeline import Task
from stitch_lsp.worker.trace_handler import trace_task
from fuse_template_suite import load, build, draw
prof_done = False
for name in sys.argv[1:]:
    src = Path(f'bench/tasks/{name}.py').read_text()
    task = Task(name=name, source=src)
    plan = make_plan(task, trace_task(src).graph)
    cand = TemplateCoder().generate(task, plan)
    probe = load(src, 'probe')
    small = getattr(probe, 'SMALL', {})
    ref_mod = load(src, 'ref', small); cand_mod = load(cand.module_source, 'cand')
    with torch.no_grad():
        ref, model = build(ref_mod, cand_mod)
        inputs = draw(ref_mod, 1)
        compiled = torch.compile(ref)
        fns = {'eager': lambda: ref(*inputs), 'compile': lambda: compiled(*inputs), 'cand': lambda: model(*inputs)}
        res = {}
        for k, f in fns.items():
            for _ in range(20): f()
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(500): f()
            t1 = time.perf_counter()
            torch.cuda.synchronize()
            res[k] = round((t1 - t0) / 500 * 1e6, 1)
        print(name, 'host us/call', res, flush=True)
        if not prof_done:
            prof_done = True
            pr = cProfile.Profile(); pr.enable()
            for _ in range(2000): model(*inputs)
            pr.disable(); torch.cuda.synchronize()
            s = io.StringIO(); pstats.Stats(pr, stream=s).sort_stats('tottime').print_stats(14); print(s.getvalue()[-3500:])
