"""Which cuDNN kernels a KernelBench convolution task runs, eager and under ``torch.compile``, and how far each
side's output is from a float64 reference: is `torch.compile`'s lead on the convolution tasks TF32?

On a GPU machine, from the repository root (the carried wheels installed by bench/gpu_env.sh):

    . bench/gpu_env.sh && python3 bench/conv_precision_probe.py kb/level2/67_Conv2d_GELU_GlobalAvgPool.py ...

PyTorch's defaults throughout (``torch.backends.cudnn.allow_tf32`` on). For each task: the inputs the
Verifier's ``large`` case draws (seed 3), eager fp32, ``torch.compile`` fp32 and the model in float64 on the
same inputs; each side's max |error| against float64, its median time (L2 flushed) and the names of the
convolution kernels it ran.
"""
from __future__ import annotations

import sys
import types

import torch

from kernelbench_gpu_check import _time  # the same flushed, event-timed median (bench/ is on the path)
from stitch_lsp.worker import inputs as inp


def _conv_kernels(fn) -> list[str]:
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    names = {e.name for e in prof.events() if e.device_type.name == "CUDA"}
    keep = ("conv", "fprop", "dgrad", "xmma", "cutlass", "nhwc", "nchw", "implicit")
    return sorted(n[:110] for n in names if any(k in n.lower() for k in keep))


def _median_ms(fn) -> float:
    return _time(fn, torch.empty(64 << 20, dtype=torch.uint8, device="cuda"), 7)


def probe(path: str) -> None:
    ns = types.ModuleType("ref")
    exec(compile(open(path).read(), path, "exec"), ns.__dict__)
    torch.manual_seed(0)
    model = ns.Model(*ns.get_init_inputs()).cuda().eval()
    torch.manual_seed(1)
    xs = inp.adversarial([x.cuda() if isinstance(x, torch.Tensor) else x for x in ns.get_inputs()], "large", 3)
    compiled = torch.compile(model)
    with torch.no_grad():
        want = model.double()(*[x.double() if isinstance(x, torch.Tensor) else x for x in xs])
        model.float()
        sides = {"eager": lambda: model(*xs), "compile": lambda: compiled(*xs)}
        print(f"== {path}  (output magnitude: max |ref| {want.abs().max().item():.4g})")
        for name, fn in sides.items():
            got = fn()
            err = (got.double() - want).abs().max().item()
            print(f"{name:8s} max |error| vs float64 {err:.4g}   {_median_ms(fn):.3f} ms")
            for k in _conv_kernels(fn):
                print(f"           {k}")
        del want
    torch.cuda.empty_cache()


if __name__ == "__main__":
    for p in sys.argv[1:]:
        probe(p)
