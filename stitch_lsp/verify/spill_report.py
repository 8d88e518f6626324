"""Spills and stack frames of the candidate's kernels, from ptxas on the CPU.

NVRTC loads give registers, shared and local memory per kernel (the worker reads
them from the driver), but not ptxas' spill counts. So, while the worker checks
the candidate, the same CUDA sources are compiled here with ``nvcc -cubin -Xptxas -v``
(no GPU needed) and the report is parsed by ``ptxas_report``; the figures are
merged into the verdict's ``compile.kernels`` by kernel name.
"""

from __future__ import annotations

import ast
import json
import os
import tempfile
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

from stitch_lsp.cancellation import CancelToken
from stitch_lsp.pipeline import Candidate
from stitch_lsp.settings import Settings
from stitch_lsp.verdict import CompileResult, KernelResources
from stitch_lsp.child_env import tool_env
from stitch_lsp.verify.nvcc import detect_arch, find_nvcc, run_process_group
from stitch_lsp.verify.ptxas_report import parse_ptxas


def kernel_sources(candidate: Candidate) -> dict[str, str]:
    """CUDA translation units: the .cu files, and Python string constants that define a __global__."""
    sources = {name: text for name, text in candidate.cuda_sources.items() if name.endswith(".cu")}
    try:
        tree = ast.parse(candidate.module_source)
    except SyntaxError:
        return sources
    for i, node in enumerate(n for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)):
        text = node.value
        # load_inline sources need torch's headers and host code: leave them to their own build.
        if "__global__" in text and "torch/extension.h" not in text and "<torch/" not in text and not _is_json(text):
            sources[f"embedded_{node.lineno}.cu"] = text
    return sources


def _is_json(text: str) -> bool:
    """A data blob that quotes CUDA source (the candidate's manifest), not a translation unit."""
    if not text.lstrip().startswith(("{", "[")):
        return False
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


class SpillReport:
    """Runs in the background; ``merge`` waits for it (bounded) and fills the verdict."""

    def __init__(self, settings: Settings, candidate: Candidate, cancel: CancelToken | None = None) -> None:
        self._future: Future | None = None
        sources = kernel_sources(candidate)
        nvcc = find_nvcc(settings.nvcc_path)
        if not sources or nvcc is None:
            return
        # Absolute: the compile runs in a temporary folder, and a relative nvccPath is the workspace's.
        self._pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="stitch-ptxas")
        self._future = self._pool.submit(self._run, settings, os.path.abspath(nvcc), sources, cancel)

    @staticmethod
    def _run(settings: Settings, nvcc: str, sources: dict[str, str], cancel: CancelToken | None) -> CompileResult:
        from stitch_lsp.verify.nvcc_diagnostics import parse_nvcc_output, to_findings

        arch = detect_arch(settings)
        result = CompileResult(ok=True, backend="nvcc")
        started = time.perf_counter()
        with tempfile.TemporaryDirectory(prefix="stitch-ptxas-") as tmp:
            for name, text in sources.items():
                path = Path(tmp) / Path(name).name
                path.write_text(text)
                cmd = [nvcc, "-cubin", f"-arch={arch}", "-Xptxas", "-v", "-std=c++17",
                       "-o", str(path.with_suffix(".cubin")), str(path)]
                out = run_process_group(cmd, timeout=settings.compile_timeout_s, cwd=tmp, token=cancel,
                                        env=tool_env(settings.extra_env))
                output = out.stdout + "\n" + out.stderr
                if out.returncode == 0:
                    result.kernels.extend(parse_ptxas(output).kernels)
                else:
                    result.ok = False
                    result.log += output[-4000:]
                    result.diagnostics.extend(to_findings(parse_nvcc_output(output), compiled_file=str(path),
                                                          display_path=name, source_text=text, cwd=tmp))
        result.seconds = time.perf_counter() - started
        return result

    def compile_result(self, timeout_s: float = 120.0) -> CompileResult | None:
        """The candidate compiled by nvcc here, for a verdict without one (no GPU ran the worker's build)."""
        if self._future is None:
            return None
        try:
            return self._future.result(timeout=timeout_s)
        except Exception:  # noqa: BLE001 - a compiler that did not answer: no compile figures
            return None
        finally:
            self._close()

    def merge(self, result: CompileResult | None, timeout_s: float = 30.0) -> None:
        if self._future is None or result is None or not result.ok:
            self._close()
            return
        try:
            found = self._future.result(timeout=timeout_s).kernels
        except Exception:
            found = []
        finally:
            self._close()
        by_name = {k.name: k for k in found}
        for k in result.kernels:
            src = by_name.get(k.name) or by_name.get(k.name.split("<")[0])
            if src is not None:
                k.spill_stores, k.spill_loads = src.spill_stores, src.spill_loads
                k.stack_bytes = max(k.stack_bytes, src.stack_bytes)
                if not k.registers:
                    k.registers = src.registers
        if not result.kernels and found and result.backend in ("none", "cupy", "nvrtc"):
            result.kernels = found

    def _close(self) -> None:
        pool = getattr(self, "_pool", None)
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)
