#!/usr/bin/env bash
# Install acegnn and what its tests need, on a fresh machine or an existing one.
#   bash scripts/install.sh [EXTRAS]      e.g.  bash scripts/install.sh smax
# EXTRAS defaults to dev,viz,smax,sc2,grf,ray (what the test suite needs). With grf among them,
# scripts/install_grf.sh then builds Google Research Football's engine (Debian packages,
# then gfootball from source; skipped where gfootball is installed already; about 9-20
# minutes on 2 cores). Where apt-get exists (Debian,
# Ubuntu; as root or with sudo), Debian's chromium and ffmpeg are installed too when
# missing: the tests marked `browser` open the HTML episode page in headless Chromium,
# and MP4 animations need ffmpeg.
# torch first: a CPU build where no NVIDIA GPU is present (a plain `pip install torch`
# would pull a multi-GB CUDA build), the default build where there is one.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
EXTRAS=${1:-dev,viz,smax,sc2,grf,ray}
TORCH_CPU_VERSION=${TORCH_CPU_VERSION:-2.13.0}
if ! "$PY" -c "import torch" >/dev/null 2>&1; then
  if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
    "$PY" -m pip install torch
  else
    "$PY" -m pip install "torch==${TORCH_CPU_VERSION}"
  fi
fi
"$PY" -m pip install -e ".[${EXTRAS}]"
case ",${EXTRAS}," in
  *,grf,*)
    if ! bash scripts/install_grf.sh; then
      echo "install.sh: gfootball could not be installed (see above); env.name=grf and the" \
           "football tests (skipped without it) need it" >&2
    fi ;;
esac

# Debian's chromium (the browser test) and ffmpeg (MP4 animations), where missing.
missing=""
command -v chromium >/dev/null 2>&1 || missing="$missing chromium"
command -v ffmpeg >/dev/null 2>&1 || missing="$missing ffmpeg"
if [ -n "$missing" ] && command -v apt-get >/dev/null 2>&1; then
  SUDO=""
  if [ "$(id -u)" != 0 ] && command -v sudo >/dev/null 2>&1; then SUDO="sudo"; fi
  if ! { $SUDO apt-get update -qq && \
         $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing; }; then
    echo "install.sh: could not install$missing with apt-get; the tests that need them" \
         "fail until they are on PATH" >&2
  fi
fi
