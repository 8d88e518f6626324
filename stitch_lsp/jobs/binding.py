"""A Candidate for a paired handwritten kernel: the ``.cu`` file plus a generated ``ModelNew``.

The generated binding launches the kernel the way the pairing says (grid, block,
shared memory, output allocation, arguments as Python expressions over the
reference's ``forward`` parameters) through the runtime loader (NVRTC). A file
with host code NVRTC cannot compile (``main``, ``<cstdio>``, ``cudaMalloc``) is
compiled with ``nvcc -ptx`` instead, device code only. The binding is plain text
run by the worker; nothing here executes anything.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

from stitch_lsp.jobs.pairing import Pairing
from stitch_lsp.pipeline import Candidate

# The generated module, a str.format template (literal braces doubled).
_TEMPLATE = (Path(__file__).parent / "templates" / "paired_binding.py.tmpl").read_text(encoding="utf-8")


def binding_source(pairing: Pairing, cu_source: str) -> str:
    """The ``ModelNew`` module for ``pairing`` (a user's own binding when it names one)."""
    if pairing.binding_source:
        return pairing.binding_source
    params = list(pairing.reference.forward_params)
    contiguous = "".join(
        f"        {p} = {p}.contiguous() if isinstance({p}, torch.Tensor) else {p}\n" for p in params
    )
    where = "pyproject.toml" if pairing.origin == "pyproject" else f"the `// stitch:` comment above line {pairing.kernel_range.start.line + 1}"
    return _TEMPLATE.format(
        kernel=pairing.kernel,
        cu_name=Path(pairing.cu_path).name,
        origin=where,
        include_dir=str(Path(pairing.cu_path).parent),
        source=cu_source,
        params=", ".join(params),
        contiguous=contiguous,
        out=pairing.out,
        block=pairing.block,
        grid=pairing.grid,
        args=", ".join(pairing.args),
        shared=pairing.shared,
    )


_QUOTED_INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.M)


def local_includes_digest(cu_path: Path, cu_source: str) -> str:
    """A digest of the ``#include "..."`` files the kernel pulls in, followed transitively.

    They are compiled with the kernel, so they are part of the question: an edited header
    must not be answered from the result cache.
    """
    digest = hashlib.sha256()
    seen: set[Path] = set()
    pending = [(cu_path.parent, cu_source)]
    while pending and len(seen) < 200:
        folder, text = pending.pop()
        for name in _QUOTED_INCLUDE.findall(text):
            path = (folder / name).resolve()
            if path in seen:
                continue
            seen.add(path)
            try:
                body = path.read_text(encoding="utf-8", errors="replace")
            except OSError:
                body = "<missing>"
            digest.update(f"{path}\0{body}\0".encode())
            pending.append((path.parent, body))
    return digest.hexdigest()[:16] if seen else ""


def build_candidate(pairing: Pairing, cu_source: str) -> Candidate:
    module_source = binding_source(pairing, cu_source)
    includes = local_includes_digest(Path(pairing.cu_path), cu_source)
    if includes:
        module_source += f"\n# local includes: {includes}\n"
    return Candidate(
        module_source=module_source,
        cuda_sources={Path(pairing.cu_path).name: cu_source},
        coder="handwritten",
        notes=[f"handwritten kernel `{pairing.kernel}` from {Path(pairing.cu_path).name}"],
    )

