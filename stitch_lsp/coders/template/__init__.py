"""The built-in template Coder: lowers a Plan's graph into fused CUDA kernels. No network, no API key.

Pointwise chains (any broadcasting, views, slices, ``cat``) become one vectorised
single-pass kernel; groups of reductions over any dimensions (norms, softmaxes,
losses, arg reductions) become one reduction kernel with their prologue and
epilogue fused in (``reductions`` and ``rows/``: a warp, a block, a Hopper cluster or,
for few long rows, several blocks per row); ``cumsum`` / ``cumprod`` a scan
kernel (``scan_kernel``); max / average pooling a kernel of a thread per output
element with the pointwise work around it (``kernels.window_kernel``). GEMMs,
convolutions, adaptive pooling, a max pool whose indices are read and attention
stay library calls (``library_call``) and what follows them is fused. What it cannot
lower stays PyTorch and is listed in ``Candidate.blocking_ops``.
"""

from __future__ import annotations

from stitch_lsp.plan.gemm_tiles import GemmOptions
from stitch_lsp.coders.template.lower import LoweredProgram, lower, sm_of
from stitch_lsp.coders.template.binding import candidate_module, edit_module
from stitch_lsp.pipeline import Candidate, Plan, Task


class TemplateCoder:
    name = "template"

    def __init__(self, gemm: GemmOptions | None = None) -> None:
        self.gemm = gemm  # which GEMMs the Triton family takes, with which tiles (None: the defaults)
        self.channels_last: bool | None = None  # False: every convolution in NCHW (None: STITCH_CONV_LAYOUT)
        # False: hand-written attention as written, not one fused call; ATTENTION_LIBRARY: attention calls stay
        # PyTorch's fused attention, not the kernel of our own.
        self.attention: bool | str = True

    def generate(self, task: Task, plan: Plan, feedback: str | None = None) -> Candidate:
        if plan.graph is None:
            raise ValueError("the plan has no traced graph; the template Coder lowers the traced graph")
        program = lower(plan.graph, self.gemm, sm=sm_of(plan.device_name), channels_last=self.channels_last,
                        attention=self.attention)
        module = candidate_module(task, program)
        return Candidate(
            module_source=module,
            # Triton kernels (the GEMM family) are Python modules: .py, so CUDA tools and rules skip them.
            cuda_sources={f"{k.name}{'.py' if k.backend == 'triton' else '.cu'}": k.source for k in program.kernels},
            coder="template",
            notes=program.notes,
            uncovered_ops=program.uncovered_ops,
            library_fusions=list(program.library_fusions),
            pattern_calls=list(program.pattern_calls),
            library_calls=list(program.library_calls),
            blocking_ops=list(program.blocking_ops),
        )


__all__ = ["TemplateCoder", "LoweredProgram", "lower", "candidate_module", "edit_module"]
