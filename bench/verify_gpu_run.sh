#!/usr/bin/env bash
# One GPU-machine call for the Verifier: GPU tests, the latency benchmark, raw tool outputs.
# Run from the repository root with OUT set (the device tool's output folder).
set -u
O=${OUT:-/tmp/out}; mkdir -p "$O" /tmp/vlogs
export STITCH_TEST_WORK=/tmp/vwork PYTHONUNBUFFERED=1
{
  nvidia-smi --query-gpu=name,driver_version,compute_cap --format=csv,noheader
  python3 -c "import torch,sys;print('python',sys.version.split()[0],'torch',torch.__version__,'cuda',torch.version.cuda)"
  ncu --version | tail -1; compute-sanitizer --version | tail -1
} > "$O/versions.txt" 2>&1
cat "$O/versions.txt"
timeout ${TEST_S:-190} python3 -m pytest tests/verify -m gpu -v -s -p no:cacheprovider --basetemp=/tmp/vbase \
  ${TEST_K:+-k "$TEST_K"} 2>&1 | tee "$O/gpu_tests.log" | grep -E "PASSED|FAILED|ERROR|SKIPPED|passed|failed|^[a-z_/]+\.py: |timing:" 
timeout ${BENCH_S:-80} python3 bench/verify_latency.py --out "$O/verify_latency.json" ${BENCH_ARGS:-} 2>&1 | tee "$O/bench.log"
# Raw ncu / compute-sanitizer outputs the runs left next to the job files.
find /tmp/vbase -name "ncu-*.txt" -o -name "sanitizer-*.txt" -o -name "worker-*.log" | head -200 > /tmp/vlogs/list
tar czf "$O/raw_outputs.tar.gz" -T /tmp/vlogs/list 2>/dev/null
ls -la "$O"
