"""bench/lsp_latency.py keeps working as the server changes (a smoke run, no timing asserted)."""

from __future__ import annotations

import subprocess
import sys

from tests.lsp.harness import REPO, server_env


def test_latency_bench_smoke(tmp_path):
    out_file = tmp_path / "latency.txt"
    out = subprocess.run(
        [sys.executable, str(REPO / "bench" / "lsp_latency.py"), "--lines", "400", "--iterations", "3",
         "--warmup", "1", "--out", str(out_file)],
        capture_output=True, text=True, env=server_env(), timeout=240, cwd=REPO,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    report = out_file.read_text()
    assert report.startswith("$ python bench/lsp_latency.py --lines 400")
    for row in ("static diagnostics", "hover", "inlay hints", "code actions"):
        assert f"idle       {row}" in report
    assert "inside the server, per static-diagnostics edit" in report
