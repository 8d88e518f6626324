#!/usr/bin/env bash
# On a GPU machine, from the repository root: the attention kernel's GPU tests, its timing beside PyTorch's
# attention and torch.compile's (bench/attention_kernel_bench.py), the eight real-model selections
# (bench/models_fuse_gpu.sh, MODELS as there) and where each selection's GPU time goes
# (bench/kernel_breakdown.py). Writes under $OUT: gpu_tests.log, att/, models/, breakdown.txt.
set -u
OUT=${OUT:-bench/results/attention_kernel}
mkdir -p "$OUT"
source bench/gpu_env.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
python3 -c "import torch, triton; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'triton', triton.__version__)" \
  | tee -a "$OUT/gpu.txt"
# Most telling first: a call cut short by the device budget still brings back what it wrote.
timeout "${TESTS_S:-120}" python3 -m pytest -q -m gpu tests/agents/test_attention_kernel_gpu.py 2>&1 | tail -15 \
  | tee "$OUT/gpu_tests.log"
OUT="$OUT/models" timeout "${MODELS_S:-240}" bash bench/models_fuse_gpu.sh > "$OUT/models_log.txt" 2>&1
tail -12 "$OUT/models_log.txt"
timeout "${BENCH_S:-100}" python3 bench/attention_kernel_bench.py --out "$OUT/att" --budget 2 2>&1 | tail -10
timeout "${TESTS_S:-120}" python3 -m pytest -q -m gpu tests/agents/test_attention_precision_gpu.py 2>&1 | tail -8 \
  | tee -a "$OUT/gpu_tests.log"
tasks=$(ls -d "$OUT"/models/tasks/*/ 2>/dev/null | tr '\n' ' ')
[ -n "$tasks" ] && timeout "${BREAKDOWN_S:-90}" python3 bench/kernel_breakdown.py $tasks --calls 10 > "$OUT/breakdown.txt" 2>&1
tail -5 "$OUT/breakdown.txt" 2>/dev/null
