#!/bin/sh
# Makes the python virtualenv the flowvision parity specs use to compare
# with timm (spec/vision/transformer_models_spec.lua, models_spec.lua and
# detection_spec.lua read $FLOWVISION_PYTHON). The venv is made from Debian's
# /usr/bin/python3 with its site packages, so it uses Debian's PyTorch and
# torchvision; timm (pure Python) is installed from PyPI without its
# dependencies so that pip never pulls another PyTorch. Needs python3-venv,
# python3-torch and access to PyPI; the specs never require it: without it
# their timm checks are pending.
#   sh spec/vision/setup_timm.sh          # -> ~/.cache/oneflow/timm-venv
#   TIMM_VENV=/some/dir sh spec/vision/setup_timm.sh
# Prints the venv's python as its last line.
set -eu
venv="${TIMM_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/oneflow/timm-venv}"
py=/usr/bin/python3
if [ -x "$venv/bin/python" ] && "$venv/bin/python" -c 'import torch, torchvision, timm' 2>/dev/null; then
  echo "$venv/bin/python"
  exit 0
fi
"$py" -c 'import torch, torchvision' || { echo "setup_timm: $py cannot import torch and torchvision" >&2; exit 1; }
mkdir -p "$(dirname "$venv")"
"$py" -m venv --system-site-packages "$venv" >&2
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps timm safetensors >&2
"$venv/bin/python" -c 'import torch, timm; print("torch", torch.__version__, "timm", timm.__version__)' >&2
echo "$venv/bin/python"
