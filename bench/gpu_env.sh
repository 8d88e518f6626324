# Sourced (from the repository root) by the scripts that run on the GPU machine: $O made, the carried
# wheels installed where the machine's python lacks the server's pure-Python dependencies, the repository
# importable, output unbuffered, nvcc on PATH.
O=${OUT:-/tmp/out}; mkdir -p "$O"
if ! python3 -c "import attrs, cattrs, pygls" 2>/dev/null && ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 PATH=/usr/local/cuda/bin:$PATH
