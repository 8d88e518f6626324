#!/usr/bin/env bash
# The suite on a GPU machine, in one command, within ~8 minutes:
#
#   bench/run_suite.sh                      # every task in bench/tasks, template Coder
#   TASKS=kb/level1 PART=1/8 bench/run_suite.sh   # a KernelBench directory (the level from its levelN), one part
#   CODER=auto EXTRA="--tags pw" bench/run_suite.sh
#   PART=1/2 bench/run_suite.sh; PART=2/2 bench/run_suite.sh   # the suite over two runs; combine with
#       python -m stitch_lsp.benchsuite.merge bench/results/suite-*-part1of2.json bench/results/suite-*-part2of2.json \
#           --out bench/results/suite-template-<stamp>-combined
#
# Writes, to $OUT (when set) and to bench/results/:
#   suite-<coder>-<stamp>.txt   the table and summary, under a header naming the GPU, driver,
#                               torch, CUDA, nvcc/ncu, the exact command and the copy bandwidth
#   suite-<coder>-<stamp>.json  the whole report (per-task results, summary, GPUs)
#   suite-<coder>-<stamp>.log   the progress log
#   suite-<coder>-<stamp>-run.tar.gz  the run directory (per-task plans, candidates, verdicts, shard logs)
# Knobs (environment): RUN_NAME (see above), TASKS (the task directory, bench/tasks; another's name goes into the file names), COMMIT (the commit the run is of, for the header; default: git), CODER (template), BUDGET seconds after which no task starts (390),
# TASK_TIMEOUT per task (150), HARD_LIMIT for the whole bench command (460, then Ctrl-C:
# finished tasks are kept and reported), PART (I/N: every N-th task), PROFILE (misses:
# Nsight Compute only on correct candidates short of a goal, to say why; all: every
# candidate, about twice the time; none), EXTRA (more `stitch bench` flags), PYTHON (python3).
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
PY="${PYTHON:-python3}"
CODER="${CODER:-template}"
TASKS="${TASKS:-bench/tasks}"
BUDGET="${BUDGET:-390}"
TASK_TIMEOUT="${TASK_TIMEOUT:-150}"
HARD_LIMIT="${HARD_LIMIT:-460}"
PROFILE="${PROFILE:-misses}"
STAMP="$(date -u +%Y%m%d-%H%M)"
NAME="suite-${CODER}-${STAMP}"
[ "$TASKS" != "bench/tasks" ] && NAME="${NAME}-$(basename "$TASKS")"
[ -n "${PART:-}" ] && NAME="${NAME}-part${PART%/*}of${PART#*/}"
# RUN_NAME: one run over several calls. Its directory (.stitch/bench/RUN_NAME, unpacked from the
# last call's -run.tar.gz and carried to the next machine) is resumed; each call's files get the
# stamp as well, and the last call's .json holds every task so far.
[ -n "${RUN_NAME:-}" ] && NAME="${RUN_NAME}"
FILES="$NAME"
[ -n "${RUN_NAME:-}" ] && FILES="${RUN_NAME}-${STAMP}"
RESULTS="$ROOT/bench/results"
RUN_DIR="$ROOT/.stitch/bench/$NAME"
mkdir -p "$RESULTS" "$RUN_DIR"

# The device machine's python lacks the server's pure-Python dependencies: install the carried wheels.
if ! "$PY" -c "import attrs, cattrs" 2>/dev/null && ls "$ROOT"/.whl/*.whl >/dev/null 2>&1; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$ROOT"/.whl/*.whl || exit 1
  export PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
# Inductor's compiled graphs and Triton kernels cached across the tasks' torch.compile baselines.
export TORCHINDUCTOR_CACHE_DIR="$ROOT/.stitch/inductor-cache"
export TRITON_CACHE_DIR="$ROOT/.stitch/triton-cache"

CMD=("$PY" -m stitch_lsp.cli bench "$TASKS" --coder "$CODER" --out "$RUN_DIR"
     --budget "$BUDGET" --task-timeout "$TASK_TIMEOUT" --verbose)
[ -n "${RUN_NAME:-}" ] && [ -d "$RUN_DIR/results" ] && CMD+=(--resume)
[ -n "${PART:-}" ] && CMD+=(--part "$PART")
CMD+=(--profile "$PROFILE")
# shellcheck disable=SC2206
[ -n "${EXTRA:-}" ] && CMD+=($EXTRA)

{
  echo "stitch bench suite run $STAMP (UTC)"
  echo "command: ${CMD[*]}"
  echo "commit: ${COMMIT:-$(git -C "$ROOT" rev-parse --verify -q HEAD 2>/dev/null || echo unknown)}"
  echo "gpu: $(nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader 2>/dev/null | paste -sd ';' -)"
  "$PY" - <<'PYEOF' 2>&1
import sys
try:
    import torch
    print(f"torch: {torch.__version__}  CUDA (torch): {torch.version.cuda}  python: {sys.version.split()[0]}")
except Exception as exc:
    print(f"torch: unavailable ({exc})")
PYEOF
  echo "nvcc: $(nvcc --version 2>/dev/null | tail -n 2 | head -n 1 || echo missing)"
  echo "ncu: $(ncu --version 2>/dev/null | tail -n 1 || echo missing)"
  echo "compute-sanitizer: $(compute-sanitizer --version 2>/dev/null | tail -n 1 || echo missing)"
} > "$RUN_DIR/env.txt"
cat "$RUN_DIR/env.txt"
echo

# Ctrl-C (SIGINT) at the hard limit: the bench stops, kills its workers, and still writes its report.
timeout -s INT -k 30 "$HARD_LIMIT" "${CMD[@]}" 2>&1 | tee "$RUN_DIR/progress.log"
STATUS=${PIPESTATUS[0]}
echo "stitch bench exited with $STATUS"

{
  cat "$RUN_DIR/env.txt"
  echo "exit status: $STATUS"
  echo
  if [ -f "$RUN_DIR/table.txt" ]; then cat "$RUN_DIR/table.txt"; else echo "(no table: the run did not get far enough to write one)"; fi
} > "$RESULTS/$FILES.txt"
[ -f "$RUN_DIR/report.json" ] && cp "$RUN_DIR/report.json" "$RESULTS/$FILES.json"
cp "$RUN_DIR/progress.log" "$RESULTS/$FILES.log"
# The per-task work folders (every candidate's files again, and its plans) stay on the machine: the details
# hold each candidate, and a whole level's folders pass the 15 MiB a file may take back.
tar --exclude="*.ncu-rep" --exclude="*.so" --exclude="*.o" --exclude="*.cubin" --exclude="*.fatbin" \
  --exclude="$(basename "$RUN_DIR")/work" -C "$(dirname "$RUN_DIR")" -czf "$RESULTS/$FILES-run.tar.gz" "$(basename "$RUN_DIR")" 2>/dev/null

if [ -n "${OUT:-}" ]; then
  mkdir -p "$OUT"
  for f in "$RESULTS/$FILES".txt "$RESULTS/$FILES".json "$RESULTS/$FILES".log "$RESULTS/$FILES-run.tar.gz"; do
    [ -f "$f" ] || continue
    if [ "$(stat -c %s "$f")" -gt $((15 * 1024 * 1024)) ]; then
      echo "not copied to \$OUT (over 15 MiB): $f"
      continue
    fi
    cp "$f" "$OUT/"
  done
fi
echo "results: $RESULTS/$FILES.txt (.json, .log, -run.tar.gz)${OUT:+ and in $OUT}"
exit "$STATUS"
