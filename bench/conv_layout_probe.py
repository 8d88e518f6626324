"""Is a task's convolution faster in channels-last, conversions included? (GPU; KernelBench-style tasks.)

For each task file whose Model holds a convolution module: the first convolution's input is caught
by a hook, then CUDA-event medians (L2 flushed) of: the convolution as eager runs it (NCHW); in
channels-last with the input converted and the output converted back to contiguous; the same
without the conversion back; and the whole Model eager. Prints a table and writes JSON.

    python bench/conv_layout_probe.py kb/level2 --out $OUT/conv_layout.json
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

CONVS = (torch.nn.Conv1d, torch.nn.Conv2d, torch.nn.Conv3d,
         torch.nn.ConvTranspose1d, torch.nn.ConvTranspose2d, torch.nn.ConvTranspose3d)


def median_ms(fn, reps: int = 15) -> float:
    """CUDA-event median of ``fn`` with L2 flushed before each call (kernelbench_gpu_check's timer)."""
    from kernelbench_gpu_check import _time

    flush = torch.empty(64 * 2**20, device="cuda")
    for _ in range(3):
        fn()
    return _time(fn, flush, reps)


def probe(path: Path) -> dict | None:
    spec = importlib.util.spec_from_file_location(path.stem.replace("-", "_"), path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    torch.manual_seed(0)
    model = mod.Model(*mod.get_init_inputs()).cuda().eval()
    conv = next((m for m in model.modules() if isinstance(m, CONVS)), None)
    if conv is None or conv.weight.dim() < 4:
        return None
    caught = {}
    handle = conv.register_forward_hook(lambda m, i, o: caught.update(x=i[0]) or None)
    inputs = [t.cuda() if isinstance(t, torch.Tensor) else t for t in mod.get_inputs()]
    with torch.no_grad():
        model(*inputs)
        handle.remove()
        x = caught["x"]
        fmt = torch.channels_last if x.dim() == 4 else torch.channels_last_3d
        nchw = median_ms(lambda: conv(x))
        conv_cl = type(conv).__new__(type(conv))
        conv_cl.__dict__.update(conv.__dict__)
        conv_cl._parameters = {k: (torch.nn.Parameter(v.detach().contiguous(memory_format=fmt)) if v is not None and v.dim() == x.dim() else v)
                               for k, v in conv._parameters.items()}
        cl_back = median_ms(lambda: conv_cl(x.contiguous(memory_format=fmt)).contiguous())
        cl_only = median_ms(lambda: conv_cl(x.contiguous(memory_format=fmt)))
        ok = torch.allclose(conv_cl(x.contiguous(memory_format=fmt)), conv(x), atol=1e-2, rtol=1e-2)
        whole = median_ms(lambda: model(*inputs))
    return {"task": path.stem, "conv": type(conv).__name__, "x": list(x.shape), "nchw_ms": nchw,
            "cl_with_conversions_ms": cl_back, "cl_in_only_ms": cl_only, "model_eager_ms": whole, "same": ok}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("dirs", nargs="+")
    ap.add_argument("--out")
    ap.add_argument("--limit", type=int, default=0)
    args = ap.parse_args()
    rows = []
    files = sorted(p for d in args.dirs for p in Path(d).glob("*.py"))
    for path in files[: args.limit or None]:
        try:
            row = probe(path)
        except Exception as exc:  # noqa: BLE001
            print(f"{path.stem}: {type(exc).__name__}: {str(exc)[:120]}", flush=True)
            continue
        finally:
            torch.cuda.empty_cache()
        if row:
            rows.append(row)
            print(f"{row['task'][:48]:48s} {row['conv']:16s} nchw {row['nchw_ms']:7.3f}  cl+conv {row['cl_with_conversions_ms']:7.3f}"
                  f"  cl(in) {row['cl_in_only_ms']:7.3f}  model {row['model_eager_ms']:7.3f}  same={row['same']}", flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps({"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
                                              "cuda": torch.version.cuda, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
