#!/usr/bin/env bash
# stitch bench over the same tasks on one GPU, on every GPU (local executor) and on every GPU
# through Ray, one after another on one multi-GPU machine; prints the wall times, the
# speed-up over one GPU and whether the verdicts agree. Run from the repository root:
#
#   OUT=/tmp/out TASKS='norm_rmsnorm_*,pw_gelu_scale_fp32,red_logsumexp_fp32' bash bench/multi_gpu_speedup.sh
#
# Each run gets an empty Inductor / Triton cache, so no run is helped by an earlier one's
# compiles. Ray comes from .raywhl/ when the machine has none (see tools/device_ray.sh).
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"; cd "$ROOT"
. bench/gpu_env.sh
O=${OUT:-/tmp/out}; mkdir -p "$O"
TASKS=${TASKS:-norm_rmsnorm_fp32,norm_rmsnorm_bf16,pw_gelu_scale_fp32,red_logsumexp_fp32}
RUNS=${RUNS:-local1 localN rayN}
NGPU=$(nvidia-smi -L | wc -l)
if ! python3 -c "import ray" 2>/dev/null && [ -f .raywhl/ray_slim.tar.xz ]; then
  mkdir -p /tmp/site && tar xJf .raywhl/ray_slim.tar.xz -C /tmp/site \
    && python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .raywhl/*.whl
  export PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
fi
SEL=(); IFS=, read -ra PATS <<< "$TASKS"; for p in "${PATS[@]}"; do SEL+=(--tasks "$p"); done
{
  nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader
  python3 -c "import torch,sys;print('python',sys.version.split()[0],'torch',torch.__version__,'cuda',torch.version.cuda)"
  python3 -c "import ray;print('ray',ray.__version__)" 2>&1 | tail -1
  echo "gpus: $NGPU  tasks: $TASKS  commit: ${COMMIT:-unknown}"
} | tee "$O/machine.txt"

bench() {  # name, extra stitch bench flags...
  local name=$1; shift
  local t0=$SECONDS; rm -rf "/tmp/run-$name"  # a warm machine keeps the last call's runs
  TORCHINDUCTOR_CACHE_DIR=/tmp/inductor-$name TRITON_CACHE_DIR=/tmp/triton-$name \
    timeout "${RUN_S:-240}" python3 -m stitch_lsp.cli bench bench/tasks "${SEL[@]}" --coder template \
    --profile none --no-bandwidth --out "/tmp/run-$name" --json "$O/$name.json" "$@" > "$O/$name.log" 2>&1
  echo "$name rc=$? wall_s=$((SECONDS - t0))" | tee -a "$O/walls.txt"
}
for r in $RUNS; do
  case $r in
    local1) bench local1 --gpus 1 ;;
    localN) bench localN --gpus "$NGPU" ;;
    rayN|ray1)
      export RAY_AUTH_MODE=disabled RAY_USAGE_STATS_ENABLED=0
      python3 -m ray.scripts.scripts start --head --num-gpus="$NGPU" --include-dashboard=false \
        --disable-usage-stats > "$O/ray_start.log" 2>&1 || { echo "ray start failed"; tail -5 "$O/ray_start.log"; continue; }
      if [ "$r" = rayN ]; then bench rayN --cluster auto --gpus "$NGPU"; else bench ray1 --cluster auto --gpus 1; fi
      python3 -m ray.scripts.scripts stop --force > /dev/null 2>&1 ;;
  esac
done
python3 - "$O" <<'PYEOF'
import json, sys
from pathlib import Path
out = Path(sys.argv[1])
walls = dict(line.split()[0:1] + [int(line.split("wall_s=")[1])] for line in (out / "walls.txt").read_text().splitlines())
rows, base = [], walls.get("local1")
verdicts = {}
for name, wall in walls.items():
    path = out / f"{name}.json"
    report = json.loads(path.read_text()) if path.exists() else {}
    results = {r["name"]: r["status"] for r in report.get("results", [])}
    verdicts[name] = results
    rows.append((name, wall, f"{base / wall:.2f}x" if base and wall else "-", sum(s == "correct" for s in results.values()),
                 len(results)))
print(f"{'run':8} {'wall s':>7} {'vs 1 GPU':>9} {'correct':>8}")
for name, wall, speed, ok, n in rows:
    print(f"{name:8} {wall:7d} {speed:>9} {ok:>4}/{n}")
same = len({json.dumps(v, sort_keys=True) for v in verdicts.values()}) == 1
print("same verdicts in every run:", same)
(out / "summary.json").write_text(json.dumps({"walls": walls, "verdicts": verdicts, "same": same}, indent=1))
PYEOF
