#!/usr/bin/env bash
# Issue 32 on one GPU: KernelBench level 3 in fp32 and levels 1 + 2 in bf16 (and fp16), with the template
# Coder, as `stitch bench` report JSONs whose rows carry the precision; then the GPU tests of the attention
# plan and of bf16 / fp16 correctness. Each call stays inside one device call's limit (HARD_LIMIT, default
# 540 s) and resumes the same run (bench/run_suite.sh's RUN_NAME), so a phase is called again until it says
# "done". Writes to $OUT and bench/results/.
#
#   PHASE=l3   bash bench/level3_gpu_run.sh     # level 3, fp32 (38 tasks; call again until "done")
#   PHASE=bf16 bash bench/level3_gpu_run.sh     # levels 1 and 2, bf16 (call again until "done")
#   PHASE=fp16 bash bench/level3_gpu_run.sh     # levels 1 and 2, fp16
#   PHASE=tests bash bench/level3_gpu_run.sh    # pytest -m gpu: attention + bf16 / fp16 (about 5 minutes)
#
# Between calls on a fresh machine, carry .stitch/bench/<RUN_NAME> (unpacked from the last call's
# -run.tar.gz in $OUT) so the run resumes. Knobs: KB (the KernelBench directory holding level1/ level2/
# level3/; default ../shared/corpora/kernelbench, else shared/corpora/kernelbench), HARD_LIMIT,
# BUDGET (seconds after which no task starts; HARD_LIMIT - 120), TASK_TIMEOUT (240), PROFILE (misses),
# RUN_NAME (default level3-fp32 / kb12-bf16 / kb12-fp16).
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
PHASE="${PHASE:-l3}"
KB="${KB:-}"
if [ -z "$KB" ]; then
  for d in ../shared/corpora/kernelbench shared/corpora/kernelbench; do
    [ -d "$d/level3" ] && KB="$d" && break
  done
fi
[ -n "$KB" ] && [ -d "$KB" ] || { echo "no KernelBench directory (set KB=...)"; exit 2; }
HARD_LIMIT="${HARD_LIMIT:-540}"
export HARD_LIMIT
export BUDGET="${BUDGET:-$((HARD_LIMIT - 120))}"
export TASK_TIMEOUT="${TASK_TIMEOUT:-240}"
export PROFILE="${PROFILE:-misses}"
export CODER=template
START=$(date +%s)

case "$PHASE" in
  l3)
    export TASKS="$KB/level3" RUN_NAME="${RUN_NAME:-level3-fp32}" EXTRA="--precision fp32"
    ;;
  bf16|fp16)
    export TASKS="$KB" RUN_NAME="${RUN_NAME:-kb12-$PHASE}" EXTRA="--precision $PHASE --levels 1,2"
    ;;
  tests)
    mkdir -p "${OUT:-/tmp/out}"
    export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
    timeout -s INT "$HARD_LIMIT" python3 -m pytest -q -p no:randomly -m gpu -n 0 \
      tests/agents/test_attention_precision_gpu.py 2>&1 | tee "${OUT:-/tmp/out}/level3_gpu_tests.log"
    exit "${PIPESTATUS[0]}"
    ;;
  *)
    echo "PHASE is l3, bf16, fp16 or tests (got $PHASE)"; exit 2
    ;;
esac

bash "$ROOT/bench/run_suite.sh"
STATUS=$?
RUN_DIR="$ROOT/.stitch/bench/$RUN_NAME"
# How long this call took, and whether the run has every task: the lead sums the calls for the README.
python3 - "$RUN_DIR" "$START" <<'PYEOF'
import json, sys, time
from pathlib import Path
run, start = Path(sys.argv[1]), float(sys.argv[2])
report = run / "report.json"
took = time.time() - start
if not report.exists():
    print(f"this call: {took:.0f} s; no report yet")
    raise SystemExit(0)
data = json.loads(report.read_text())
rows = data.get("results", [])
left = data.get("not_run", [])
statuses = {}
for r in rows:
    statuses[r["status"]] = statuses.get(r["status"], 0) + 1
steps = sum(r.get("seconds", 0.0) for r in rows)
print(f"this call: {took:.0f} s; tasks done {len(rows)}, left {len(left)}; {statuses}; "
      f"task seconds summed {steps:.0f} s; precision {data['run'].get('precision') or 'fp32'}")
print("done" if not left else "call again to resume")
PYEOF
exit "$STATUS"
