#!/bin/sh
# torch_venv.sh -- a PyTorch 2.x from PyPI in bench/.venv (git-ignored), for
# the side-by-side benchmarks (bench/kernels.lua, bench/models.lua: with
# torchvision). PyTorch 1.13 is Debian's
# python3-torch under /usr/bin/python3. Prints the venv's python on success;
# when the install cannot happen (no network, no space) it says so and exits
# 1, and the benchmarks run without a PyTorch 2.x column.
#   sh bench/torch_venv.sh
set -u
DIR=$(cd "$(dirname "$0")" && pwd)/.venv
PY="$DIR/bin/python3"
if [ -x "$PY" ] && "$PY" -c 'import torch, torchvision, sys; sys.exit(int(torch.__version__.split(".")[0]) < 2)' 2>/dev/null; then
  echo "$PY"
  exit 0
fi
if ! python3 -m venv "$DIR" >&2; then
  echo "torch_venv: python3 -m venv failed (install python3-venv); no PyTorch 2.x" >&2
  exit 1
fi
if ! "$DIR/bin/pip" install --quiet --disable-pip-version-check torch torchvision numpy >&2; then
  echo "torch_venv: pip install torch torchvision failed; no PyTorch 2.x" >&2
  exit 1
fi
"$PY" -c 'import torch; print("torch_venv: torch", torch.__version__)' >&2 || exit 1
echo "$PY"
