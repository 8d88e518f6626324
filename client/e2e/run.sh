#!/usr/bin/env bash
# The extension in a real VS Code: code-server + headless Chromium (playwright-core), no GPU needed.
#   client/e2e/run.sh            build the .vsix if needed, run, write bench/results/editor_e2e/
# Needs: Chromium (apt-get install chromium; or CHROMIUM=/path), code-server set up by
# /work/shared/tools/vscode-web setup (or VSCODE_WEB_HOME pointing at such a folder), a Python with
# stitch_lsp importable (STITCH_PYTHON, default: the python3 on PATH) and client/node_modules (npm ci).
# Skips (exit 0, saying why) where Chromium or code-server is missing; fails (exit 1) on a broken check.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
client=$(dirname "$here")
repo=$(dirname "$client")
out=${E2E_OUT:-$repo/bench/results/editor_e2e}
vsweb=${VSCODE_WEB_HOME:-/tmp/vscode-web}
chromium=${CHROMIUM:-$(command -v chromium || command -v chromium-browser || true)}
entry=$vsweb/cs/node_modules/code-server/out/node/entry.js
node_bin=$vsweb/bin/node

if [ -z "$chromium" ]; then
  echo "editor e2e: SKIPPED: no Chromium (apt-get install chromium, or set CHROMIUM)"; exit 0
fi
if [ ! -f "$entry" ] || [ ! -x "$node_bin" ]; then
  echo "editor e2e: SKIPPED: code-server is not set up in $vsweb (run /work/shared/tools/vscode-web setup, or set VSCODE_WEB_HOME)"; exit 0
fi
if [ ! -d "$client/node_modules/playwright-core" ]; then
  echo "editor e2e: SKIPPED: client/node_modules has no playwright-core (npm ci in client/)"; exit 0
fi
python=${STITCH_PYTHON:-$(command -v python3)}
if ! "$python" -c 'import stitch_lsp.lsp.server' 2>/dev/null; then
  echo "editor e2e: FAILED: stitch_lsp does not import in $python (set STITCH_PYTHON, or PYTHONPATH)"; exit 1
fi
vsix=$client/dist/stitch.vsix
if [ ! -f "$vsix" ] || [ -n "$(find "$client/src" "$client/package.json" -newer "$vsix" -print -quit)" ]; then
  (cd "$client" && npm run -s build && npm run -s package >/dev/null)
fi

work=$(mktemp -d /tmp/stitch-e2e.XXXXXX)
port=${E2E_PORT:-$(( 18000 + RANDOM % 2000 ))}
cs_pid=""
cleanup() {
  if [ -n "$cs_pid" ]; then kill "$cs_pid" 2>/dev/null || true; wait "$cs_pid" 2>/dev/null || true; fi
  [ -n "${E2E_KEEP:-}" ] || rm -rf "$work"
}
trap cleanup EXIT

# The workspace a new user would open: a kernel, a model, and a setting the workspace sets for itself.
ws=$work/project
mkdir -p "$ws/.vscode" "$ws/tools" "$work/data/User" "$work/data/Machine" "$work/ext"
cp "$here/fixtures/scale.cu" "$ws/"
# The model file is the fuse tests' own (a residual block), so the two never drift apart.
cp "$here/../../tests/fixtures/fuse/block.py" "$ws/model.py"
cp "$here/fixtures/scale.cu" "$ws/restart.cu"
printf '#!/bin/sh\nexec nvcc "$@"\n' > "$ws/tools/nvcc-wrapper"; chmod +x "$ws/tools/nvcc-wrapper"
# Settings the workspace sets for itself: a compiler in its pyproject.toml, and in .vscode/settings.json the
# same compiler (VS Code itself hides it while untrusted: a restricted setting) and a pair of files outside it.
printf '[tool.stitch]\nnvccPath = "./tools/nvcc-wrapper"\n' > "$ws/pyproject.toml"
cat > "$ws/.vscode/settings.json" <<'JSON'
{
  "stitch.nvccPath": "./tools/nvcc-wrapper",
  "stitch.pair": [{ "kernel": "/opt/elsewhere/k.cu:k", "reference": "/opt/elsewhere/ref.py" }]
}
JSON
# The user's own settings name the interpreter (the case that was wrongly reported as the workspace's).
# code-server is a remote window: a machine-overridable setting is read from the Remote (Machine) tab.
printf '{\n  "stitch.python": "%s"\n}\n' "$python" > "$work/data/Machine/settings.json"
cat > "$work/data/User/settings.json" <<JSON
{
  "security.workspace.trust.enabled": true,
  "security.workspace.trust.startupPrompt": "once",
  "workbench.startupEditor": "none",
  "workbench.tips.enabled": false,
  "extensions.autoUpdate": false,
  "extensions.autoCheckUpdates": false,
  "extensions.ignoreRecommendations": true,
  "telemetry.telemetryLevel": "off",
  "update.mode": "none",
  "chat.disableAIFeatures": true,
  "workbench.secondarySideBar.defaultVisibility": "hidden",
  "editor.hover.delay": 300,
  "window.commandCenter": false,
  "stitch.trace.server": "${E2E_TRACE:-off}"
}
JSON
"$node_bin" "$entry" --user-data-dir "$work/data" --extensions-dir "$work/ext" --install-extension "$vsix" --force >/dev/null
PYTHONPATH=${PYTHONPATH:-$repo} STITCH_CONFIG=/dev/null nohup "$node_bin" "$entry" --auth none --bind-addr 127.0.0.1:$port \
  --disable-telemetry --disable-update-check --user-data-dir "$work/data" \
  --extensions-dir "$work/ext" "$ws" > "$work/code-server.log" 2>&1 &
cs_pid=$!
for _ in $(seq 60); do curl -s -o /dev/null "http://127.0.0.1:$port/healthz" && break; sleep 0.5; done

mkdir -p "$out"
rm -f "$out"/*.png "$out"/timings.json
E2E_URL="http://127.0.0.1:$port/?folder=$ws" E2E_WORKSPACE=$ws E2E_DATA=$work/data E2E_OUT=$out \
  CHROMIUM=$chromium NODE_PATH=$client/node_modules node "$here/e2e.mjs"
