"""The hand-written probes' timer: the median of ``n`` CUDA-event timings of ``fn`` after one warm-up call."""
import torch


def timeit(fn, n=10):
    fn()
    torch.cuda.synchronize()
    es = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(n)]
    for a, b in es:
        a.record()
        fn()
        b.record()
    torch.cuda.synchronize()
    ts = sorted(a.elapsed_time(b) for a, b in es)
    return ts[len(ts) // 2]
