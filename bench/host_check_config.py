"""A task's generated kernels run on the host at a configuration of its own choosing, against eager on the CPU.

``kernelbench_dry_run.py --host-check`` shrinks a task's module-level sizes, which a model that checks its own
geometry (a Swin transformer's windows) refuses. This sets the sizes and the constructor's arguments instead:

    PYTHONPATH=. python bench/host_check_config.py ../shared/corpora/kernelbench/level3/30_SwinTransformerV2.py \\
        --set batch_size=2 --set image_size=28 --init '[28, 2, 3, 10, 12, [2, 2], [3, 6], 7]'

Traces the task so configured, lowers it with the template Coder, builds every kernel with g++ (the host shim of
tests/agents) and compares the program's outputs with eager PyTorch on random inputs and with NaN planted.
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def configured(source: str, sizes: dict[str, str], init: str | None) -> str:
    for name, value in sizes.items():
        source, n = re.subn(rf"^{re.escape(name)}\s*=.*$", f"{name} = {value}", source, flags=re.MULTILINE)
        if not n:
            raise SystemExit(f"no module-level {name} = ... in the task")
    if init is not None:
        ast.literal_eval(init)  # plain values only
        source += f"\n\ndef get_init_inputs():\n    return {init}\n"
    return source


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("task", type=Path)
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE", help="a module-level size")
    parser.add_argument("--init", help="get_init_inputs()'s list, as a Python literal")
    args = parser.parse_args()
    sizes = dict(item.split("=", 1) for item in args.set)
    source = configured(args.task.read_text(), sizes, args.init)

    from stitch_lsp.coders.template import lower
    from stitch_lsp.worker.trace_handler import trace_task
    from tests.agents import test_template_pointwise_host as host
    from tests.agents import test_template_rows_host as rows

    if host.GXX is None or host.INCLUDE is None:
        print("needs g++ and the CUDA headers")
        return 2
    start = time.time()
    reply = trace_task(source)
    if not reply.ok:
        print(f"{args.task.name}: trace failed: {reply.message}")
        return 1
    program = lower(reply.graph)
    threads = max((k.grid * k.block for k in program.kernels), default=0)
    print(f"{args.task.name}: {'covered' if program.covered else 'partial: ' + '; '.join(program.blocking_ops)}; "
          f"{len(program.kernels)} kernels, at most {threads} threads")
    host._driver = rows._driver  # threads, barriers, shuffles
    with tempfile.TemporaryDirectory() as tmp:
        host.check_against_eager(source, program, ("random", "nan"), Path(tmp))
    print(f"{args.task.name}: host check ok (random, nan) in {time.time() - start:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
