#!/usr/bin/env bash
# The GEMM family on a GPU machine, in one call: its GPU tests, then the probe (tiles tuned per GEMM
# shape, every task's fused program against eager, fp64 errors), then `stitch bench` on a few tasks.
#
#   OUT=dir KB=dir-of-kernelbench-gemm-tasks STEPS="tests probe bench" bash bench/gemm_family_gpu.sh
#
# KB: KernelBench level-2 GEMM tasks (the corpus is not part of this repository: copy them in).
# BENCH_TASKS: the `--tasks` names for the `stitch bench` step ("all": every task in BENCH_DIR);
# BENCH_EXTRA: more `stitch bench` flags; TASK_TIMEOUT_S: its --task-timeout (150);
# STITCH_GEMM=triton|cublas|auto: the GEMM family's mode.
set -u
ROOT="$(cd "$(dirname "$0")/.." && pwd)"; cd "$ROOT"
O=${OUT:-/tmp/out}; mkdir -p "$O"
# shellcheck source=bench/gpu_env.sh
. bench/gpu_env.sh
export TRITON_CACHE_DIR="$ROOT/.stitch/triton-cache" TORCHINDUCTOR_CACHE_DIR="$ROOT/.stitch/inductor-cache"
{
  nvidia-smi --query-gpu=name,driver_version,compute_cap --format=csv,noheader
  python3 -c "import torch,triton,sys;print('python',sys.version.split()[0],'torch',torch.__version__,'cuda',torch.version.cuda,'triton',triton.__version__)"
  echo "cores: $(nproc); commit: ${COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}"
} > "$O/machine.txt" 2>&1
cat "$O/machine.txt"
for step in ${STEPS:-tests probe bench}; do
  case $step in
    tests)
      timeout "${TESTS_S:-200}" python3 -m pytest -m gpu -v -s -p no:cacheprovider tests/agents/test_gemm_family_gpu.py \
        > "$O/gpu_tests.log" 2>&1
      echo "== tests: rc=$? $(grep -E '[0-9]+ (passed|failed)' "$O/gpu_tests.log" | tail -1)"
      grep -E "PASSED|FAILED|ERROR|max error|tiles:" "$O/gpu_tests.log" | head -30 ;;
    probe)
      # shellcheck disable=SC2086
      timeout "${PROBE_S:-330}" python3 bench/gemm_family_probe.py bench/tasks/gemm_*.py ${KB:+$KB/*.py} \
        --out "$O/probe" --per-shape --budget "${TUNE_S:-100}" --task-budget "${TASKS_S:-280}" \
        --compile "${COMPILE:-bf16}" 2>&1 | tee "$O/probe.log" | grep -vE '^\{"task"' ;;
    bench)
      args=()
      if [ "${BENCH_TASKS:-}" != all ]; then
        set -f
        for t in ${BENCH_TASKS:-gemm_linear_bias_gelu_fp32 gemm_swiglu_mlp_bf16}; do args+=(--tasks "$t"); done
        set +f
      fi
      limit=${BENCH_S:-200}
      # Start no task in the last 45 s, so the report is written by the bench itself, not after a kill.
      timeout -s INT -k 20 "$limit" python3 -m stitch_lsp.cli bench "${BENCH_DIR:-bench/tasks}" \
        --coder template --out "$ROOT/.stitch/bench/gemm" --profile none --task-timeout "${TASK_TIMEOUT_S:-150}" \
        --budget $((limit - ${BENCH_TAIL_S:-45})) ${BENCH_EXTRA:-} "${args[@]}" > "$O/bench.log" 2>&1
      echo "== bench: rc=$?"; tail -60 "$O/bench.log"
      cp "$ROOT/.stitch/bench/gemm/report.json" "$O/bench_report.json" 2>/dev/null
      cp "$ROOT/.stitch/bench/gemm/table.txt" "$O/bench_table.txt" 2>/dev/null ;;
  esac
done
