"""Loading the pair: the device, the reference and the candidate, their signatures, the memory plan, the two
models built with the same weights, and the candidate's compile record."""

from __future__ import annotations

import inspect
import time
from pathlib import Path
from typing import Any

import torch

from stitch_lsp.verdict import CompileResult, KernelResources, VerdictStatus
from stitch_lsp.worker import inputs as inp
from stitch_lsp.worker.basic_handlers import describe_device
from stitch_lsp.worker.memory_phases import PhaseMemory, make_plan
from stitch_lsp.worker.modules import import_file
from stitch_lsp.worker.verify.failures import Stop, short
from stitch_lsp.worker.verify.state import RunState, copy_state

INIT_SEED = 1234
_PRECISION_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


class Loading(RunState):
    """``VerifyRun``'s loading phase (a mixin of ``RunState``)."""

    def setup_device(self) -> None:
        if self.cpu:
            self.events.append("CPU test mode: no CUDA kernel runs; compile, poisoning and GPU timing are skipped")
            self.not_checked.append("allocator poisoning (CPU test mode)")
            return
        if not torch.cuda.is_available() or self.opts.gpu_index >= torch.cuda.device_count():
            raise Stop(self.verdict(
                VerdictStatus.NO_GPU,
                f"no CUDA GPU visible to the worker (torch {torch.__version__}, CUDA {torch.version.cuda or 'none'}): "
                "nothing was run"))
        torch.cuda.set_device(self.opts.gpu_index)
        self.device = torch.device("cuda", self.opts.gpu_index)
        key = f"device_info:{self.opts.gpu_index}"
        if key not in self.ctx.state:
            self.ctx.state[key] = describe_device(self.opts.gpu_index)
        self.info = self.ctx.state[key]

    def load_reference(self) -> Any:
        try:
            ref = import_file(Path(self.job.reference_path), "reference")
        except BaseException as exc:  # noqa: BLE001
            raise Stop(self.verdict(VerdictStatus.BAD_INPUT, f"the reference raised on import: {short(exc)}"))
        missing = [n for n in ("Model", "get_inputs") if not hasattr(ref, n)]
        if missing:
            raise Stop(self.verdict(VerdictStatus.BAD_INPUT,
                                    f"the reference is not in KernelBench format: no {' or '.join(missing)}"))
        if not hasattr(ref, "get_init_inputs"):
            ref.get_init_inputs = lambda: []
        return ref

    def load_candidate(self) -> Any:
        self.ctx.progress("compiling", "importing the candidate", 5)
        t0 = time.perf_counter()
        try:
            cand = import_file(Path(self.job.candidate_path), "candidate")
            self.import_seconds = time.perf_counter() - t0
        except BaseException as exc:  # noqa: BLE001
            raise Stop(self.fail_from(exc, "importing the candidate"))
        if not hasattr(cand, "ModelNew"):
            raise Stop(self.verdict(VerdictStatus.BAD_INPUT, "the candidate defines no ModelNew class"))
        return cand

    def check_signature(self, ref: Any, cand: Any) -> None:
        def positional(cls: Any, method: str) -> tuple[int, bool]:
            try:
                sig = inspect.signature(getattr(cls, method))
            except (TypeError, ValueError):
                return -1, True
            params = [p for p in sig.parameters.values() if p.name != "self"]
            variadic = any(p.kind is p.VAR_POSITIONAL for p in params)
            return len([p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
                        and p.default is p.empty]), variadic

        for method in ("forward", "__init__"):
            want, _ = positional(ref.Model, method)
            have, variadic = positional(cand.ModelNew, method)
            if want >= 0 and have >= 0 and not variadic and want != have:
                raise Stop(self.verdict(
                    VerdictStatus.BAD_INPUT,
                    f"wrong signature: ModelNew.{method} takes {have} argument(s), Model.{method} takes {want}"))

    def plan_memory(self, ref: Any) -> None:
        """The memory plan, from a meta-device run of the reference, before anything runs on the GPU."""
        self.ctx.progress("planning", "memory plan", 8)
        source = Path(self.job.reference_path).read_text(errors="replace")
        plan, sizes = make_plan(ref, source, self.opts, cuda=not self.cpu, timing=self.opts.timing)
        self.plan = plan
        # Poisoned blocks for a set of inputs and a set of outputs: whichever comes first takes
        # one, and the candidate's outputs still land in poisoned memory.
        blocks = (sizes.input_tensor_bytes + sizes.output_tensor_bytes) if sizes else []
        self.memory = PhaseMemory(plan, blocks, cuda=not self.cpu)
        if plan.compare_chunk_elements:
            self.chunk = plan.compare_chunk_elements
        if plan.status == "too_large":
            raise Stop(self.verdict(VerdictStatus.TOO_LARGE, "too large: " + plan.message))

    def build(self, ref: Any, cand: Any) -> tuple[Any, Any]:
        try:
            inp.seed_everything(INIT_SEED)
            init = list(ref.get_init_inputs())
            ref_model = ref.Model(*init)
        except BaseException as exc:  # noqa: BLE001
            raise Stop(self.verdict(VerdictStatus.BAD_INPUT, f"the reference raised while building Model: {short(exc)}"))
        from stitch_lsp.runtime import loader

        self.records_before = len(loader.compile_records())
        t0 = time.perf_counter()
        try:
            inp.seed_everything(INIT_SEED)
            cand_model = cand.ModelNew(*init)
        except BaseException as exc:  # noqa: BLE001
            raise Stop(self.fail_from(exc, "ModelNew(*get_init_inputs())"))
        # Importing the module is part of the build (load_inline compiles at import time).
        seconds = time.perf_counter() - t0 + self.import_seconds
        ref_model = self.to_device(ref_model)
        cand_model = self.to_device(cand_model)
        self.copy_weights(ref_model, cand_model)
        self.build_seconds = seconds
        self.refresh_compile()
        return ref_model, cand_model

    def refresh_compile(self) -> None:
        """Kernels a candidate loads lazily (on its first forward) count as well."""
        if self.compile is not None and not self.compile.ok:
            return
        from stitch_lsp.runtime import loader

        records = loader.compile_records()[self.records_before:]
        # Records from construction are inside build_seconds; later (lazy) ones add their own time.
        lazy = sum(r.seconds for r in records[self.records_at_build:]) if self.records_at_build is not None else 0.0
        if self.records_at_build is None:
            self.records_at_build = len(records)
        self.compile = self.compile_result(records, self.build_seconds + lazy)

    def to_device(self, model: Any) -> Any:
        try:
            if isinstance(model, torch.nn.Module):
                model = model.to(self.device).eval()
                cast = _PRECISION_DTYPES.get(self.opts.precision)
                if cast is not None:  # as KernelBench casts both models (the reference's source casts itself)
                    model = model.to(cast)
        except BaseException as exc:  # noqa: BLE001
            raise Stop(self.fail_from(exc, "moving the model to the device"))
        return model

    def copy_weights(self, ref_model: Any, cand_model: Any) -> None:
        if not isinstance(ref_model, torch.nn.Module) or not isinstance(cand_model, torch.nn.Module):
            return
        copied, skipped = copy_state(ref_model.state_dict(), cand_model)
        if copied or skipped:
            self.events.append(f"weights copied from the reference by name: {copied}"
                               + (f"; not in the reference (left as initialised): {', '.join(skipped[:8])}"
                                  if skipped else ""))

    def compile_result(self, records: list[Any], seconds: float) -> CompileResult:
        source = self.files.get(self.job.candidate_path, "")
        if records:
            unique: dict[tuple[str, str], Any] = {}
            for r in records:  # a kernel loaded again (second shape, every forward) is one kernel
                unique.setdefault((r.name, r.mangled, r.source_sha), r)
            kernels = [KernelResources(name=r.name, mangled=r.mangled, registers=r.registers,
                                       shared_bytes=r.shared_bytes, stack_bytes=r.local_bytes,
                                       constant_bytes=r.const_bytes) for r in unique.values()]
            cached = all(r.cached for r in unique.values())
            return CompileResult(ok=True, backend="nvrtc", seconds=seconds, cached=cached, kernels=kernels,
                                 log="\n".join(r.log for r in records if r.log))
        backend = "load_inline" if "load_inline" in source else "cupy" if "RawModule" in source or "RawKernel" in source \
            else "none"
        return CompileResult(ok=True, backend=backend, seconds=seconds)
