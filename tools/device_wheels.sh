#!/usr/bin/env bash
# Downloads the wheels the GPU machine lacks (its python3 is 3.12 with torch) into .whl/.
set -euo pipefail
cd "$(dirname "$0")/.."
PKGS="pygls==2.1.1 lsprotocol==2025.0.0 attrs==26.1.0 cattrs==26.2.1 tree-sitter==0.26.1 tree-sitter-cuda==0.21.2
tree-sitter-python==0.25.0 pytest==9.2.0 pluggy iniconfig packaging pygments pytest-asyncio==1.5.0 pytest-lsp==1.0.1
pytest-timeout typing-extensions"
mkdir -p .whl
for p in $PKGS; do
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --platform manylinux1_x86_64 --platform any -d .whl "$p"
done
ls .whl
