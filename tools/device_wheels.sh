#!/usr/bin/env bash
# Downloads the wheels the GPU machine lacks (its python3 is 3.12 with torch) into .whl/.
set -euo pipefail
cd "$(dirname "$0")/.."
PKGS="pygls==2.1.1 lsprotocol==2025.0.0 attrs==26.1.0 cattrs==26.2.1 tree-sitter==0.26.1 tree-sitter-cuda==0.21.2
tree-sitter-python==0.25.0 pytest==9.2.0 pluggy iniconfig packaging pygments pytest-asyncio==1.5.0 pytest-lsp==1.0.1
pytest-timeout typing-extensions
anthropic==2.12.0 anyio==4.16.0 sniffio==1.3.1 idna==3.20 docstring-parser==0.18.0 httpx2==2.16.2 httpcore2==2.16.2
h11==0.16.0 truststore==0.10.5 jiter==0.19.0 opentelemetry-api==1.45.2 pydantic==2.14.3 pydantic-core==2.50.4
annotated-types==0.8.0 typing-inspection==0.4.5 einops==0.8.2"
# (anthropic and its dependencies: the LLM Coder's GPU test talks to a local fake Messages API; einops: KernelBench
# level 3's Mamba tasks import it.)
mkdir -p .whl
for p in $PKGS; do
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --platform manylinux1_x86_64 --platform any -d .whl "$p"
done
ls .whl
