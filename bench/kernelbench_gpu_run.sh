#!/usr/bin/env bash
# One GPU call for the KernelBench work: the quick candidate check (bench/kernelbench_gpu_check.py) over
# candidates generated beforehand on a CPU, then (MODE=bench) `stitch bench --coder template --profile misses`
# over a sample directory. Writes what it measured under $OUT.
#
#   CANDS=bench_cands ONLY=L1_33_,L1_95_ CHECK_BUDGET=120 bash bench/kernelbench_gpu_run.sh
#   MODE=bench SAMPLE=bench_sample BENCH_BUDGET=200 bash bench/kernelbench_gpu_run.sh
#   MODE=both ...   (the check, then the bench, in one call)
set -u
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
{
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)"
  git rev-parse --short HEAD 2>/dev/null || true
} | tee "$OUT/machine.txt"
MODE=${MODE:-check}
if [ "$MODE" = "check" ] || [ "$MODE" = "both" ]; then
  python3 bench/kernelbench_gpu_check.py check "${CANDS:-bench_cands}" --budget-s "${CHECK_BUDGET:-120}" \
    --only "${ONLY:-}" --json "$OUT/check.json" 2>&1 | tee "$OUT/check.log"
fi
if [ "$MODE" = "bench" ] || [ "$MODE" = "both" ]; then
  echo "+ stitch bench ${SAMPLE:-bench_sample} --coder template --profile misses --budget ${BENCH_BUDGET:-200}" \
    "--task-timeout ${TASK_TIMEOUT:-120}" | tee -a "$OUT/machine.txt"
  python3 -m stitch_lsp.cli bench "${SAMPLE:-bench_sample}" --coder template --profile misses \
    --budget "${BENCH_BUDGET:-200}" --task-timeout "${TASK_TIMEOUT:-120}" --out "$OUT/run" \
    --json "$OUT/bench.json" 2>&1 | tee "$OUT/bench.log"
  cp "$OUT/run/table.txt" "$OUT/table.txt" 2>/dev/null || true
  tar -czf "$OUT/run.tar.gz" -C "$OUT" run 2>/dev/null && rm -rf "$OUT/run"
fi
