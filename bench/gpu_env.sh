# Sourced by the GPU-machine scripts from the repository root: the wheels that machine lacks
# (when carried in .whl/), this checkout on PYTHONPATH, unbuffered output, the CUDA tools.
if ! python3 -c "import attrs, pygls" 2>/dev/null && ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 PATH=/usr/local/cuda/bin:$PATH
