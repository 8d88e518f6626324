#!/usr/bin/env bash
# One GPU call: the template Coder suite (bench/fuse_template_suite.py), then the fuse GPU tests
# that fit in what is left of the budget. Writes everything under $OUT.
set -u
OUT=${OUT:-.}
start=$(date +%s)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$OUT/gpu.txt" 2>&1
timeout "${SUITE_S:-235}" python3 bench/fuse_template_suite.py --out "$OUT" --budget-s "${SUITE_BUDGET_S:-160}" 2>&1 \
  | grep -v Warning > "$OUT/suite_log.txt"
left=$(( ${TOTAL_S:-285} - ($(date +%s) - start) ))
if [ "$left" -gt 40 ]; then
  STITCH_FUSE_TASKS="${FUSE_TASKS:-norm_rmsnorm_bf16}" timeout "$left" python3 -m pytest -q -x -p no:cacheprovider \
    -m gpu tests/fuse/test_fuse_gpu.py 2>&1 | tail -40 > "$OUT/gpu_tests.txt"
fi
tail -48 "$OUT/suite_log.txt"; cat "$OUT/gpu_tests.txt" 2>/dev/null | tail -15
