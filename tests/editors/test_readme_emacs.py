"""README's Emacs (eglot) configuration, loaded as written into a batch Emacs that runs
the real server: eglot connects for a CUDA buffer, diagnostics reach Flymake, the
trust flag reaches the server, and `stitch-command` sends a command.

Needs ``emacs`` with eglot (built into 29+; on 28 the eglot package, e.g. Debian's
``elpa-eglot``); skips without them. `cuda-mode` comes from MELPA in real use: here a
stand-in derived from `c++-mode` plays its part.
"""

from __future__ import annotations

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

CHECK = r""";; -*- lexical-binding: t -*-
(when (file-directory-p "/usr/share/emacs/site-lisp/elpa")
  (dolist (dir (directory-files "/usr/share/emacs/site-lisp/elpa" t "^[a-z]"))
    (add-to-list 'load-path dir)))
(require 'eglot)
(define-derived-mode cuda-mode c++-mode "CUDA")
(add-to-list 'auto-mode-alist '("\\.cuh?\\'" . cuda-mode))
(load (expand-file-name "stitch.el" (getenv "WORKDIR")))
(defvar out nil)
(find-file (expand-file-name "scale.cu" (getenv "WORKDIR")))
(apply #'eglot (eglot--guess-contact))
(let ((deadline (+ (float-time) 90)))
  (while (and (null (flymake-diagnostics)) (< (float-time) deadline))
    (accept-process-output nil 0.2)))
(push (cons 'mode (symbol-name major-mode)) out)
(push (cons 'diagnostics (mapcar #'flymake-diagnostic-text (flymake-diagnostics))) out)
(push (cons 'trusted (plist-get (jsonrpc-request (eglot--current-server-or-lose) :stitch/serverInfo nil) :trusted)) out)
(goto-char (point-min)) (forward-line 2) (forward-char 20)
(push (cons 'command (condition-case err (progn (stitch-command "stitch.showReport") "sent") (error (format "%S" err)))) out)
(with-temp-file (expand-file-name "result.el" (getenv "WORKDIR")) (prin1 out (current-buffer)))
(kill-emacs 0)
"""


def _emacs_with_eglot() -> bool:
    if shutil.which("emacs") is None:
        return False
    probe = subprocess.run(
        ["emacs", "-Q", "--batch", "--eval", CHECK.split("(require 'eglot)")[0] + "(require 'eglot)"],
        capture_output=True, text=True, timeout=60,
    )
    return probe.returncode == 0


@pytest.mark.timeout(200)
def test_emacs_eglot_config_from_readme(tmp_path):
    if not _emacs_with_eglot():
        pytest.skip("needs emacs with eglot")
    text = (REPO / "README.md").read_text(encoding="utf-8")
    block = re.findall(r"```elisp\n(.*?)```", text.split("### Emacs (eglot)", 1)[1], re.S)[0]
    (tmp_path / "stitch.el").write_text(block)
    (tmp_path / "check.el").write_text(CHECK)
    (tmp_path / "scale.cu").write_text(KERNEL)
    (tmp_path / ".git").mkdir()
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "python3").write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    (bindir / "python3").chmod(0o755)
    env = server_env({"WORKDIR": str(tmp_path), "HOME": str(tmp_path / "home")})
    env["PATH"] = f"{bindir}:{env['PATH']}"
    run = subprocess.run(["emacs", "-Q", "--batch", "-l", str(tmp_path / "check.el")],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=180)
    result_file = tmp_path / "result.el"
    assert result_file.exists(), run.stderr[-3000:]
    result = result_file.read_text()
    assert '(mode . "cuda-mode")' in result
    assert "[STC001]" in result, result
    assert "(trusted . t)" in result, "the README's :trusted t reached the server"
    assert '(command . "sent")' in result, result
