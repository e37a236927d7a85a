#!/usr/bin/env bash
# Install acegnn and what its tests need, on a fresh machine or an existing one.
#   bash scripts/install.sh [EXTRAS]      e.g.  bash scripts/install.sh dev,smax
# torch first: a CPU build where no NVIDIA GPU is present (a plain `pip install torch`
# would pull a multi-GB CUDA build), the default build where there is one.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
EXTRAS=${1:-dev}
TORCH_CPU_VERSION=${TORCH_CPU_VERSION:-2.13.0}
if ! "$PY" -c "import torch" >/dev/null 2>&1; then
  if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
    "$PY" -m pip install torch
  else
    "$PY" -m pip install "torch==${TORCH_CPU_VERSION}"
  fi
fi
"$PY" -m pip install -e ".[${EXTRAS}]"
