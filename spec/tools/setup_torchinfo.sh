#!/bin/sh
# Makes the python virtualenv spec/tools/summary_spec.lua compares
# flow.utils.summary's mult-adds with (torchinfo's "Mult-Adds" column; the
# spec reads $TORCHINFO_PYTHON). Made from Debian's /usr/bin/python3 with its
# site packages, so it uses Debian's PyTorch; torchinfo (pure Python) comes
# from PyPI without dependencies so that pip never pulls another PyTorch.
# Needs python3-venv, python3-torch and PyPI; without it the spec's torchinfo
# check is pending (its hand-derived Conv/Linear figures still run).
#   sh spec/tools/setup_torchinfo.sh        # -> ~/.cache/oneflow/torchinfo-venv
# Prints the venv's python as its last line.
set -eu
venv="${TORCHINFO_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/oneflow/torchinfo-venv}"
py=/usr/bin/python3
if [ -x "$venv/bin/python" ] && "$venv/bin/python" -c 'import torch, torchinfo' 2>/dev/null; then
  echo "$venv/bin/python"
  exit 0
fi
"$py" -c 'import torch' || { echo "setup_torchinfo: $py cannot import torch" >&2; exit 1; }
mkdir -p "$(dirname "$venv")"
"$py" -m venv --system-site-packages "$venv" >&2
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps torchinfo >&2
"$venv/bin/python" -c 'import torch, torchinfo; print("torch", torch.__version__, "torchinfo", torchinfo.__version__)' >&2
echo "$venv/bin/python"
