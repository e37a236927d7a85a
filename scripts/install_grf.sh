#!/usr/bin/env bash
# Install Google Research Football (gfootball 2.10.2), the back-end of env.name=grf.
#   bash scripts/install_grf.sh
# Does nothing when `import gfootball` already works. Otherwise installs the Debian
# packages gfootball's engine builds against (only those missing; with sudo when not
# root; needs apt-get), then gfootball from PyPI, which compiles its C++ engine: about
# 20 minutes on 2 free cores, much longer on a loaded machine.
set -euo pipefail
PY=${PYTHON:-python3}

if "$PY" -c "import gfootball.env" >/dev/null 2>&1; then
  echo "install_grf.sh: gfootball is already installed"
  exit 0
fi

PACKAGES="cmake build-essential libgl1-mesa-dev libsdl2-dev libsdl2-image-dev libsdl2-ttf-dev
  libsdl2-gfx-dev libboost-python-dev libboost-thread-dev libboost-system-dev
  libboost-filesystem-dev libdirectfb-dev libst-dev mesa-utils xvfb"
missing=""
for p in $PACKAGES; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing="$missing $p"
  fi
done
if [ -n "$missing" ]; then
  if ! command -v apt-get >/dev/null 2>&1; then
    echo "install_grf.sh: gfootball's engine needs the Debian packages$missing, and apt-get" \
         "is not here: install them (or their equivalents) by hand" >&2
    exit 1
  fi
  SUDO=""
  if [ "$(id -u)" != 0 ]; then
    if ! command -v sudo >/dev/null 2>&1; then
      echo "install_grf.sh: installing$missing needs root or sudo" >&2
      exit 1
    fi
    SUDO="sudo"
  fi
  $SUDO apt-get update -qq
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing
fi

# gfootball's setup.py imports setuptools and wheel and builds in this environment
# (--no-build-isolation); psutil and six are imported by gfootball at run time.
"$PY" -m pip install psutil setuptools wheel six
"$PY" -m pip install --no-build-isolation gfootball==2.10.2
"$PY" -c "import gfootball.env" && echo "install_grf.sh: gfootball installed"
