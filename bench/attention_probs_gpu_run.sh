#!/usr/bin/env bash
# On a GPU machine, from the repository root: attention's probabilities as one kernel of our own, checked and
# timed. The GPU tests (the kernel through the Verifier in fp32 and bf16, beside the attention kernel's), the
# kernel alone against eager and torch.compile in both its forms (bench/attention_probs_bench.py), then
# nanoGPT's four selections through `stitch fuse` (bench/models_fuse_gpu.sh), 67-70 being the one it is for.
#
#   OUT=/tmp/out MODELS=.devcarry/models bash bench/attention_probs_gpu_run.sh
#
# Writes under $OUT: gpu.txt, gpu_tests.log, probs/ (attention_probs.{json,md}), models/.
set -u
OUT=${OUT:-bench/results/attention_probs}
mkdir -p "$OUT"
source bench/gpu_env.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)" | tee -a "$OUT/gpu.txt"
timeout "${TESTS_S:-150}" python3 -m pytest -q -s -p no:randomly -m gpu -n 0 tests/agents/test_attention_probs_gpu.py \
  tests/agents/test_attention_kernel_gpu.py 2>&1 | grep -v Warning | tail -12 | tee "$OUT/gpu_tests.log"
timeout "${BENCH_S:-150}" python3 bench/attention_probs_bench.py --out "$OUT/probs" --budget 2 2>&1 | tail -14
OUT="$OUT/models" FOLDERS=nanoGPT timeout "${MODELS_S:-120}" bash bench/models_fuse_gpu.sh 2>&1 \
  | grep "nanoGPT/model.py" | tee "$OUT/models_log.txt"
