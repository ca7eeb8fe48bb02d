#!/bin/bash
# Everything that needs a CUDA GPU, on one GPU, with one summary table; exit 1 on any
# failure. Steps and flags: tests/gpu/run_gpu.py (--list, --only NAME, --cpu-dry-run).
set -uo pipefail
cd "$(dirname "$0")/../.."
if [ -n "${PYTHON:-}" ]; then
  py=$PYTHON
elif [ -x .venv/bin/python ]; then
  py=.venv/bin/python
else
  py=python3
fi
exec "$py" tests/gpu/run_gpu.py "$@"
