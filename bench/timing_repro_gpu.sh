#!/usr/bin/env bash
# The timing evidence of issue 29, on one GPU, in one go (the device machine, or any CUDA machine):
#   1. bench/timing_side_by_side.py: the RMSNorm pair by Stitch, triton's do_bench and cuda-bench;
#   2. the GPU timing tests (tests/verify/test_timing_gpu.py);
#   3. bench/resave_latency.py: warm re-saves of a paired kernel;
#   4. stitch bench --repeat 5 over 11 tasks (bench/tasks, three at smaller and two at larger sizes):
#      repeat.json in the layout of bench/results/timing_repro_<gpu>.json.
# Usage: OUT=dir REPEAT=5 DEADLINE=545 bash bench/timing_repro_gpu.sh   (the bench gets what is left of DEADLINE s)
set -u
START=$SECONDS
cd "$(dirname "$0")/.."
source bench/gpu_env.sh  # wheels from .whl/ where carried, this checkout on PYTHONPATH
if ls .cbwhl/*.whl >/dev/null 2>&1; then  # cuda-bench (NVBench's Python package), when carried
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/cbsite .cbwhl/*.whl \
    && export PYTHONPATH="$PYTHONPATH:/tmp/cbsite"
fi
OUT=${OUT:-/tmp/timing_out}; REPEAT=${REPEAT:-5}; DEADLINE=${DEADLINE:-545}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
T=$(mktemp -d)
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv
python3 -c "import torch,sys;print('torch',torch.__version__,'cuda',torch.version.cuda,'python',sys.version.split()[0])"

echo "== 1. side by side"
timeout 150 python3 bench/timing_side_by_side.py --out "$OUT/side_by_side.json" 2>>"$OUT/errs.txt" | tail -14
echo "== 1b. side by side, a second process"
timeout 90 python3 bench/timing_side_by_side.py --no-cuda-bench --out "$OUT/side_by_side_2.json" 2>>"$OUT/errs.txt" | tail -13
echo "== 2. GPU timing tests"
timeout 90 python3 -m pytest -q -p no:randomly -p no:cacheprovider tests/verify/test_timing_gpu.py 2>&1 | tail -4
echo "== 3. warm re-save"
timeout 100 python3 bench/resave_latency.py --out "$OUT/resave.json" 2>>"$OUT/errs.txt"

echo "== 4. stitch bench --repeat $REPEAT"
mkdir -p "$T/tasks"
for f in norm_rmsnorm_fp32 pw_gelu_scale_fp32 pw_activation_zoo_fp32 norm_bias_residual_layernorm_fp32 red_softmax_causal_fp32 pw_swiglu_bf16; do
  cp "bench/tasks/$f.py" "$T/tasks/"
done
sed 's/^M, N = 8192, 4096/M, N = 256, 4096/' bench/tasks/norm_rmsnorm_fp32.py > "$T/tasks/norm_rmsnorm_fp32_m256.py"
sed 's/^M, N = 8192, 4096/M, N = 512, 4096/' bench/tasks/pw_gelu_scale_fp32.py > "$T/tasks/pw_gelu_scale_fp32_m512.py"
sed 's/^B, H, S = 4, 16, 1024/B, H, S = 4, 16, 256/' bench/tasks/red_softmax_causal_fp32.py > "$T/tasks/red_softmax_causal_fp32_s256.py"
sed 's/^M, N = 8192, 4096/M, N = 65536, 4096/' bench/tasks/norm_rmsnorm_fp32.py > "$T/tasks/norm_rmsnorm_fp32_m65536.py"
sed 's/^M, N = 8192, 4096/M, N = 65536, 4096/' bench/tasks/pw_gelu_scale_fp32.py > "$T/tasks/pw_gelu_scale_fp32_m65536.py"
grep -H -E '^(M, N|B, H, S) = ' "$T"/tasks/*.py | sed "s|$T/tasks/||"
BENCH_S=$((DEADLINE - (SECONDS - START) - 10)); echo "bench gets $BENCH_S s"
export STITCH_COMMIT=${COMMIT:-}
(cd "$T" && timeout -s INT -k 8 "$BENCH_S" python3 -m stitch_lsp.cli bench tasks --coder template --repeat "$REPEAT" --no-profile --no-bandwidth \
   --task-timeout 120 --out "$T/rep" > "$OUT/bench_repeat.log" 2>&1); echo "bench exit $?"
cp "$T/rep/repeat.json" "$OUT/repeat.json" 2>/dev/null
tail -16 "$OUT/bench_repeat.log"
tar czf "$OUT/runs.tgz" -C "$T/rep" . 2>/dev/null
ls -la "$OUT"
