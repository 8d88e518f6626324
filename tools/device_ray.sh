#!/usr/bin/env bash
# Packs Ray for the GPU machine, whose python3 (3.12) has no Ray and whose calls carry at most
# 64 MiB: the cp312 wheel (about 76 MiB) without the Java jars and the libraries Stitch does not
# use (RLlib, Data, Serve, Train, Tune, LLM, the dashboard's web client), as .raywhl/ray_slim.tar.xz
# (about 20 MB), plus the wheels of Ray's needs that machine lacks. bench/multi_gpu_speedup.sh unpacks it.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
RAY=${RAY:-ray==2.60.0}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
mkdir -p .raywhl
pip_dl() { python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 --platform any "$@"; }
pip_dl -d "$tmp" "$RAY"
(cd "$tmp" && mkdir un && cd un && unzip -q ../ray-*.whl \
  && rm -rf ray/jars ray/rllib ray/data ray/serve ray/train ray/tune ray/llm ray/dashboard/client/build \
  && tar cf - . | xz -T0 -6 > "$ROOT/.raywhl/ray_slim.tar.xz")
pip_dl -d .raywhl jsonschema jsonschema-specifications referencing rpds-py
ls -la .raywhl
