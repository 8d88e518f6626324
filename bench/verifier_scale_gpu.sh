#!/usr/bin/env bash
# The Verifier at KernelBench sizes, in one GPU-machine call: the stream record probe, the
# 6 GiB tasks (ReLU, softmax, LayerNorm), the stream cheats and honest multi-stream
# candidates at small and large sizes, a too-large task, the out-of-memory-then-correct
# bench run, and the GPU corpus (without its slowest tests). Logs go to $OUT.
#
#   OUT=/tmp/out bash bench/verifier_scale_gpu.sh [GROUP...]
#   groups: machine probe scale small bench corpus cli   (default: all of them; "small" = scale without 6 GiB)
set -u
ROOT="$(cd "$(dirname "$0")/.." && pwd)"; cd "$ROOT"
O=${OUT:-/tmp/out}; mkdir -p "$O"
. bench/gpu_env.sh
GROUPS_TO_RUN=${*:-machine probe scale bench corpus cli}
SUMMARY="$O/summary.txt"; : > "$SUMMARY"
note() { echo "$*" | tee -a "$SUMMARY"; }
run_tests() {  # name, seconds, pytest args...
  local name=$1 secs=$2; shift 2
  local t0=$SECONDS
  timeout "$secs" python3 -m pytest -m gpu -v -s -p no:cacheprovider "$@" > "$O/$name.log" 2>&1
  note "== $name: rc=$? in $((SECONDS - t0)) s: $(grep -E '^=+ .*(passed|failed|error).* =+$' "$O/$name.log" | tail -1)"
  grep -E "(PASSED|FAILED|ERROR)( |$)" "$O/$name.log" | sed 's/^/   /' | head -40 | tee -a "$SUMMARY"
}
for g in $GROUPS_TO_RUN; do
  case $g in
    machine)
      {
        nvidia-smi --query-gpu=name,driver_version,compute_cap,memory.total --format=csv,noheader
        python3 -c "import torch,sys;print('python',sys.version.split()[0],'torch',torch.__version__,'cuda',torch.version.cuda)"
        echo "commit: ${COMMIT:-$(git rev-parse --short HEAD 2>/dev/null)}  command: OUT=\$OUT bash bench/verifier_scale_gpu.sh $GROUPS_TO_RUN"
      } | tee -a "$SUMMARY" ;;
    probe)
      t0=$SECONDS
      timeout 120 python3 bench/stream_record_probe.py ${PROBE_RAW:+--raw} > "$O/stream_probe.log" 2>&1
      note "== probe: rc=$? in $((SECONDS - t0)) s"
      grep -v "^  raw" "$O/stream_probe.log" | tee -a "$SUMMARY" ;;
    scale)  run_tests gpu_scale ${SCALE_S:-420} tests/verify/test_gpu_scale.py ;;
    small)  run_tests gpu_scale_small ${SMALL_S:-200} tests/verify/test_gpu_scale.py -k "not gib" ;;
    bench)  run_tests bench_clean_worker ${BENCH_S:-300} tests/bench/test_bench_clean_worker_gpu.py ;;
    corpus) run_tests gpu_corpus 240 tests/verify/test_gpu_corpus.py \
              -k "not load_inline and not hanging and not races and not memcheck and not profile" ;;
    cli)
      t0=$SECONDS
      timeout ${CLI_S:-240} python3 -m stitch_lsp.cli verify tests/verify/corpus/gpu/scale/ref_softmax_6gib.py \
        tests/verify/corpus/gpu/scale/softmax_rows.py --workdir /tmp/stitch-cli --quiet > "$O/verify_softmax_6gib.txt" 2>&1
      note "== cli (stitch verify, softmax 4096 x 393216): rc=$? in $((SECONDS - t0)) s"
      grep -E "^(CORRECT|INCORRECT|HACKING|TOO_LARGE|OUT_OF_MEMORY|ERROR)|^accuracy|^  [0-9.]+x eager|^memory|peak allocated|^  (trials|second_shape|accuracy|timing) |speedup" \
        "$O/verify_softmax_6gib.txt" | tee -a "$SUMMARY" ;;
  esac
done
