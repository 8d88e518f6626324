"""Hover cards on a kernel's name and its launch sites: the Nsight Compute analysis and
verdict where one exists, else what is known statically and how to get a profile.

The card is rendered by ``stitch_lsp.reports.kernel_card`` from what the kernel
checks already know: hovering never starts work. ptxas' figures come from
compile on save: its own hover beside this card on the kernel's name, its
resource hint's tooltip inside the card at launch sites.
"""

from __future__ import annotations

from stitch_lsp.findings import Position
from stitch_lsp.lsp.features.kernel_checks import kernel_checks, kernel_name_at
from stitch_lsp.lsp.server import StitchServer
from stitch_lsp.reports.kernel_card import kernel_card

RULE_SOURCES = ("rules",)
NVCC_SOURCE = "nvcc"  # compile on save's resource hints


def register(server: StitchServer) -> None:
    checks = kernel_checks(server)

    def hover(uri: str, position: Position) -> str | None:
        if not server.is_cuda(uri):
            return None
        name = kernel_name_at(server, uri, position)
        if name is None:
            return None
        pairing, _, problem = checks.pairing_at(uri, position, name)
        path = pairing.cu_path if pairing is not None else server.path_of(uri)
        st = checks.kernels.get((path, name))
        # Rule findings inside this kernel's definition.
        analysis = server.cuda.get(uri)
        span = next((k.range for k in analysis.kernels if k.name == name), None) if analysis is not None else None
        findings = []
        if span is not None:
            for source in RULE_SOURCES:
                findings += [
                    f for f in server.diagnostics.get(uri, source)
                    if span.start.line <= f.range.start.line <= span.end.line
                ]
        running = ""
        if st is not None and st.job is not None and not st.job.done:
            event = st.job.last_event
            running = f"{st.job.title}: {event.stage if event else 'queued'}…"
        card = kernel_card(
            name,
            verdict=st.verdict if st is not None else None,
            findings=findings,
            paired=pairing is not None or bool(problem),
            pairing_problem=problem,
            trusted=server.trusted,
            running=running,
            cu_path=path,
        )
        # At a launch site the compile-on-save hover (ptxas figures, on the kernel's name) is not shown:
        # bring its figures here, from the resource hint on the kernel's line.
        kernel = next((k for k in analysis.kernels if k.name == name), None) if analysis is not None else None
        if kernel is not None and not kernel.name_range.contains(position):
            line = kernel.name_range.start.line
            for hint in server.hints.get(uri, NVCC_SOURCE):
                if hint.position.line == line and hint.tooltip:
                    card = card.rstrip() + "\n\n" + hint.tooltip.strip() + "\n"
                    break
        return card

    server.hover_providers.append(hover)
