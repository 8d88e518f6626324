#!/usr/bin/env bash
# On a GPU machine, from the repository root: the real-model selections of bench/models_fuse.py end in
# verdicts. MODELS: the corpus folder (default shared/corpora/models: copy /work/shared/corpora/models
# there so it travels with the checkout); FOLDERS: which model folders this call runs (default both;
# one a call fits a 10-minute limit better). Writes $OUT/gpu.txt, models_fuse_<folder>.{json,md}, log.txt.
set -u
OUT=${OUT:-bench/results/models_fuse_gpu}
mkdir -p "$OUT"
source bench/gpu_env.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$OUT/gpu.txt" 2>&1
for folder in ${FOLDERS:-nanoGPT minGPT}; do
  OUT="$OUT" python3 bench/models_fuse.py "${MODELS:-shared/corpora/models}" --folder "$folder" --no-overhead \
    2>&1 | grep -v Warning | tee -a "$OUT/log.txt"
done
cat "$OUT"/models_fuse_*.md
