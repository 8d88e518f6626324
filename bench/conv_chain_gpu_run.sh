#!/usr/bin/env bash
# On a GPU machine, from the repository root: convolutions chained in channels-last (conv_chain.py) checked
# and timed. First the GPU tests of the convolutions' layouts (tests/agents/test_conv_tail_gpu.py: each tail
# alone, and the chained nets of test_conv_chain_host.py; with the recurrent cell's and attention's precision
# tests), then KernelBench level 3's convolutional nets through
# `stitch bench` (bench/level3_gpu_run.sh, PHASE=l3, its own RUN_NAME), which resumes across calls.
#
#   OUT=/tmp/out KB=.devcarry/kernelbench bash bench/conv_chain_gpu_run.sh          # call again until "done"
#   TESTS_S=0 ... bash bench/conv_chain_gpu_run.sh                                  # the bench only
#
# Knobs: KB (holding level3/), NETS (task name prefixes, space separated; default: the 21 convolutional nets),
# RUN_NAME (level3-chains), HARD_LIMIT (seconds for the bench part, default 430), TESTS_S (the tests' limit,
# 240). Writes under $OUT: gpu.txt, conv_gpu_tests.log, and level3_gpu_run.sh's files.
set -u
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
OUT=${OUT:-/tmp/out}
KB=${KB:-../shared/corpora/kernelbench}
mkdir -p "$OUT"
source bench/gpu_env.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)" | tee -a "$OUT/gpu.txt"
if [ "${TESTS_S:-240}" != 0 ]; then
  # The layouts' own tests, then the recurrent cell (outputs of two sizes in one kernel) and attention's precision
  # tests, which have not run on a GPU since their last change.
  timeout "${TESTS_S:-240}" python3 -m pytest -q -m gpu -n 0 tests/agents/test_conv_tail_gpu.py \
    tests/agents/test_recurrent_library_calls_gpu.py tests/agents/test_attention_precision_gpu.py 2>&1 | tail -25 \
    | tee "$OUT/conv_gpu_tests.log"
fi
NETS=${NETS:-"4_ 5_ 6_ 7_ 9_ 10_ 11_ 12_ 13_ 14_ 15_ 16_ 18_ 19_ 20_ 22_ 23_ 24_ 26_ 27_ 45_"}
SUBSET=$(mktemp -d)/kernelbench
mkdir -p "$SUBSET/level3"
for prefix in $NETS; do
  cp "$KB"/level3/"$prefix"*.py "$SUBSET/level3/"
done
KB="$SUBSET" PHASE=l3 RUN_NAME="${RUN_NAME:-level3-chains}" HARD_LIMIT="${HARD_LIMIT:-430}" PROFILE="${PROFILE:-none}" \
  OUT="$OUT" bash bench/level3_gpu_run.sh
