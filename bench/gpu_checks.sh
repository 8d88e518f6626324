#!/usr/bin/env bash
# Every GPU test group in one GPU-machine call, each under its own time limit, logs to $OUT.
# Run from the repository root:  OUT=/tmp/out bash bench/gpu_checks.sh [GROUP...]
# Groups: verify jobs llm bench analysis fuse fuse_lsp loader latency (default: all but fuse, fuse_lsp, loader),
# and the narrower ones: timing attention programs scopes (the rule-scope sanitizer cases) models_nanoGPT models_minGPT
# (bench/models_fuse_gpu.sh, MODELS= the corpus' models folder carried with the checkout).
set -u
ROOT="$(cd "$(dirname "$0")/.." && pwd)"; cd "$ROOT"
O=${OUT:-/tmp/out}; mkdir -p "$O"
. bench/gpu_env.sh
{
  nvidia-smi --query-gpu=name,driver_version,compute_cap --format=csv,noheader
  python3 -c "import torch,sys;print('python',sys.version.split()[0],'torch',torch.__version__,'cuda',torch.version.cuda)"
  echo "cores: $(nproc)"
} > "$O/machine.txt" 2>&1
cat "$O/machine.txt"
GROUPS_TO_RUN=${*:-verify jobs llm bench analysis latency}
run_tests() {  # name, seconds, pytest args... (GPU-marked tests only, unless MARK="" is set)
  local name=$1 secs=$2; shift 2
  timeout "$secs" python3 -m pytest ${MARK--m gpu} -v -s -p no:cacheprovider "$@" > "$O/gpu_$name.log" 2>&1
  echo "== $name: rc=$? $(grep -E '^(=+ )?[0-9]+ (passed|failed)|passed|failed' "$O/gpu_$name.log" | tail -1)"
  grep -E "(PASSED|FAILED|ERROR)$|^(FAILED|ERROR) " "$O/gpu_$name.log" | sed 's/^/   /' | head -40
}
for g in $GROUPS_TO_RUN; do
  case $g in
    verify)   run_tests verify 200 tests/verify -k "not gib" ;;  # the 6 GiB tasks: bench/verifier_scale_gpu.sh
    jobs)     run_tests jobs 120 tests/jobs/test_kernel_checks_gpu.py ;;
    llm)      run_tests llm 90 tests/llm/test_llm_gpu.py ;;
    bench)    run_tests bench 300 tests/bench/test_bench_gpu.py tests/bench/test_bandwidth_and_runner.py ;;
    analysis) run_tests analysis 240 tests/analysis/test_rules_on_gpu.py ;;  # ~34 sanitizer runs
    fuse)     run_tests fuse 240 tests/fuse ;;
    # The LSP end-to-end test runs everywhere; on a GPU it must end with the verified edit offered.
    fuse_lsp) MARK="" run_tests fuse_lsp 300 tests/fuse/test_fuse_lsp_e2e.py -k listed_then_run ;;
    loader)   run_tests loader 60 tests/verify/test_loader_gpu.py ;;
    timing)   run_tests timing 120 tests/verify/test_timing_gpu.py ;;
    attention) run_tests attention 300 tests/agents/test_attention_precision_gpu.py ;;
    # Kernels compiled together before a program's first call; recurrent modules as one library call.
    programs) run_tests programs 240 tests/agents/test_kernel_prefetch_gpu.py tests/agents/test_recurrent_library_calls_gpu.py ;;
    scopes)   run_tests scopes 150 tests/analysis/test_rules_on_gpu.py -k scope_hazard ;;
    models_*) OUT="$O/models" FOLDERS="${g#models_}" timeout 300 bash bench/models_fuse_gpu.sh > "$O/${g}.log" 2>&1
              echo "== $g: rc=$?"; tail -15 "$O/${g}.log" ;;
    latency)
      timeout 120 python3 bench/lsp_latency.py --conditions idle gpu-job --real-gpu --iterations 120 \
        --out "$O/lsp_latency_gpu_job_h100.txt" > "$O/lsp_latency.log" 2>&1
      echo "== latency: rc=$?"; tail -12 "$O/lsp_latency_gpu_job_h100.txt" 2>/dev/null ;;
  esac
done
