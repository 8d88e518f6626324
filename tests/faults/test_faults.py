"""Faults, through the real server over stdio: in each the server keeps running, the user sees why
(a diagnostic on the kernel, a message), and no file of theirs changes.

Verification faults run the product's own Verifier, worker pool and worker on the
CPU (``tests/faults/cpu_verifier.py``): a kernel paired with a reference and a
Python ``binding`` whose ``ModelNew`` misbehaves the way a candidate can.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import signal
import sys
import textwrap
from pathlib import Path

from lsprotocol import types as lsp

from tests.lsp.harness import open_doc, running_server, save_doc, wait_until

KERNEL = (
    "// stitch: reference=ref.py binding=cand.py\n"
    "__global__ void scale(float* y, const float* x, int n) {\n"
    "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
    "    if (i < n) y[i] = 2.0f * x[i];\n"
    "}\n"
)
REFERENCE = textwrap.dedent(
    """\
    import torch
    {before}
    class Model(torch.nn.Module):
        def forward(self, x):
            return x * 2.0
    def get_inputs():
        return [torch.randn(1024)]
    def get_init_inputs():
        return []
    """
)
CANDIDATE = textwrap.dedent(
    """\
    import os, sys, time, torch
    {at_import}
    class ModelNew(torch.nn.Module):
        def forward(self, x):
            {in_forward}
            return x * 2.0
    """
)
CPU_VERIFIER = {"STITCH_TEST_VERIFIER": "tests.faults.cpu_verifier:CpuVerifier"}
NO_COMPILE = {"onSave": {"compile": False}}


def snapshot(root: Path) -> dict[str, str]:
    """Every user file (not Stitch's own .stitch/) and its digest."""
    out = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root)
        if path.is_file() and rel.parts[0] != ".stitch":
            out[str(rel)] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def workspace(root: Path, *, at_import: str = "", in_forward: str = "pass", reference_before: str = "") -> Path:
    (root / "k.cu").write_text(KERNEL)
    (root / "ref.py").write_text(REFERENCE.format(before=reference_before))
    (root / "cand.py").write_text(CANDIDATE.format(at_import=at_import, in_forward=in_forward))
    return root


async def still_serving(client, uri: str, name: str = "scale") -> None:
    """The server answers a hover on the first kernel, correctly."""
    hover = await asyncio.wait_for(client.text_document_hover_async(lsp.HoverParams(
        text_document=lsp.TextDocumentIdentifier(uri=uri), position=lsp.Position(line=1, character=17))), 20)
    assert hover is not None and f"`{name}`" in hover.contents.value


def verify_diagnostics(client, uri: str) -> list[lsp.Diagnostic]:
    return [d for d in client.diagnostics.get(uri, []) if d.source == "stitch verify"]


# One session, one kernel per fault: (binding's import line, forward line, reference's first line).
FAULTS = {
    "exits_at_import": ("os._exit(3)", "pass", ""),
    "sys_exits_at_import": ("sys.exit(0)", "pass", ""),
    "reference_raises": ("", "pass", "raise RuntimeError('reference is broken')"),
    "out_of_gpu_memory": ("", "raise torch.OutOfMemoryError('CUDA out of memory. Tried to allocate 80.00 GiB')", ""),
    "killed_mid_job": ("", "open(PID_FILE, 'w').write(str(os.getpid())); time.sleep(120)", ""),
    "fine_but_no_tools": ("", "pass", ""),  # correct, so it would be profiled and sanitized: ncu and
                                            # compute-sanitizer are not on PATH
}


def fault_workspace(root: Path, pid_file: Path) -> Path:
    kernels = []
    for name, (at_import, in_forward, ref_first) in FAULTS.items():
        (root / f"ref_{name}.py").write_text(REFERENCE.format(before=ref_first))
        (root / f"cand_{name}.py").write_text(
            f"PID_FILE = {str(pid_file)!r}\n" + CANDIDATE.format(at_import=at_import, in_forward=in_forward))
        kernels.append(KERNEL.replace("ref.py", f"ref_{name}.py").replace("cand.py", f"cand_{name}.py")
                       .replace("scale", name))
    (root / "k.cu").write_text("\n".join(kernels))
    return root


def kernel_line(root: Path, name: str) -> int:
    return next(i for i, line in enumerate((root / "k.cu").read_text().splitlines()) if f" {name}(" in line)


async def test_verification_faults_each_told_on_their_kernel(tmp_path):
    root, pid_file = tmp_path / "ws", tmp_path / "worker.pid"
    root.mkdir()
    fault_workspace(root, pid_file)
    before = snapshot(root)
    empty = tmp_path / "empty-path"
    empty.mkdir()
    settings = {"onSave": {"compile": False, "profile": True, "sanitize": True}, "verifyTimeoutS": 120}
    async with running_server(root, env={**CPU_VERIFIER, "PATH": str(empty)}, settings=settings,
                              initialization_options={"trusted": True}) as client:
        uri = open_doc(client, root / "k.cu")
        save_doc(client, uri)
        # The worker running `killed_mid_job` is killed from outside, as the OOM killer or a user would.
        pid = int(await wait_until(lambda: pid_file.exists() and pid_file.read_text().strip(), 120, "that job"))
        os.kill(pid, signal.SIGKILL)

        def on(name: str) -> list[lsp.Diagnostic]:
            line = kernel_line(root, name)  # its `// stitch:` comment is the line above
            return [d for d in verify_diagnostics(client, uri) if line - 1 <= d.range.start.line <= line]

        await wait_until(lambda: all(on(name) for name in FAULTS), 180, "a diagnostic on every kernel")
        await still_serving(client, uri, "exits_at_import")
        told = {name: [(d.code, d.message) for d in on(name)] for name in FAULTS}
        messages = [m.message for m in client.messages]
    assert snapshot(root) == before, "a user file changed"

    def said(name: str, codes: tuple[str, ...], *words: str) -> None:
        hits = [m for c, m in told[name] if c in codes]
        assert hits and all(w in hits[0] for w in words), (name, told[name])

    said("exits_at_import", ("STITCH-CRASHED",), "exit code 3")
    said("sys_exits_at_import", ("STITCH-CRASHED", "STITCH-BAD-INPUT", "STITCH-ERROR"), "SystemExit")
    said("reference_raises", ("STITCH-BAD-INPUT",), "reference is broken")
    said("out_of_gpu_memory", ("STITCH-OUT-OF-MEMORY",), "out of memory")
    # Whether a SIGKILL reads as a crash or as the OOM killer is the pool's call; either way the user
    # is told the worker was killed.
    said("killed_mid_job", ("STITCH-CRASHED", "STITCH-OUT-OF-MEMORY"), "killed")
    said("fine_but_no_tools", ("STITCH-NO-PROFILE",), "ncu")
    said("fine_but_no_tools", ("STITCH-NO-SANITIZER",), "compute-sanitizer")
    assert not [m for m in messages if "internal error" in m]


FULL_DISK = textwrap.dedent(
    """\
    import resource, signal, sys
    # Files may not grow past a few bytes: every write under .stitch/ fails the way a full disk does.
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (64, 64))
    from stitch_lsp.lsp.main import main
    sys.exit(main())
    """
)


async def test_disk_full_under_dot_stitch(tmp_path):
    root = workspace(tmp_path)
    before = snapshot(root)
    async with running_server(root, env=CPU_VERIFIER, settings=NO_COMPILE, command=[sys.executable, "-c", FULL_DISK],
                              initialization_options={"trusted": True}) as client:
        uri = open_doc(client, root / "k.cu")
        save_doc(client, uri)
        await wait_until(lambda: verify_diagnostics(client, uri) or [m for m in client.messages if "Stitch" in m.message],
                         120, "a word about the failed write")
        shown = " ".join(d.message for d in verify_diagnostics(client, uri)) + " ".join(m.message for m in client.messages)
        assert "File too large" in shown or "cannot write" in shown, shown
        await still_serving(client, uri)
    assert snapshot(root) == before


NVCC_HANGS = "#!/bin/sh\nsleep 300\n"


async def test_nvcc_hanging_is_killed_and_the_file_says_so(tmp_path):
    fake = tmp_path / "tools" / "nvcc"
    fake.parent.mkdir()
    fake.write_text(NVCC_HANGS)
    fake.chmod(0o755)
    root = tmp_path / "ws"
    root.mkdir()
    (root / "k.cu").write_text(KERNEL)
    before = snapshot(root)
    user = {"userSettings": {"nvccPath": str(fake)}}
    async with running_server(root, settings={"compileTimeoutS": 1.0, "arch": "sm_90", "onSave": {"verify": False}},
                              initialization_options=user) as client:
        uri = open_doc(client, root / "k.cu")
        save_doc(client, uri)
        diag = await wait_until(lambda: [d for d in client.diagnostics.get(uri, []) if d.code == "nvcc-timeout"], 30,
                                "the timeout diagnostic")
        assert "did not finish within 1 s" in diag[0].message and "compileTimeoutS" in diag[0].message
        await still_serving(client, uri)
    assert snapshot(root) == before


async def test_nvcc_missing(tmp_path):
    (tmp_path / "k.cu").write_text(KERNEL)
    before = snapshot(tmp_path)
    user = {"userSettings": {"nvccPath": str(tmp_path / "no-such" / "nvcc")}}
    async with running_server(tmp_path, initialization_options=user, settings={"onSave": {"verify": False}}) as client:
        uri = open_doc(client, tmp_path / "k.cu")
        save_doc(client, uri)
        save_doc(client, uri)
        told = await wait_until(lambda: [m.message for m in client.messages if "could not find nvcc" in m.message], 30,
                                "the missing-nvcc message")
        await asyncio.sleep(0.5)
        assert len(told) == 1 and "stitch.nvccPath" in told[0]
        await still_serving(client, uri)
    assert snapshot(tmp_path) == before
