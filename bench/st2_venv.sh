#!/bin/sh
# st2_venv.sh -- sentence-transformers on PyTorch 2.x, for bench/text.lua's
# PyTorch 2.x column. PyTorch 2.x comes from bench/torch_venv.sh (bench/.venv);
# this makes ~/.cache/oneflow/st2-venv from the same base python, puts that
# venv's site-packages on its path (a .pth file, so torch is not downloaded
# twice) and installs the same pinned sentence-transformers stack as
# spec/text/setup_sentence_transformers.sh, plus numpy, without
# dependencies. Prints the venv's python; exits 1 (saying why) when it
# cannot be made, and the benchmark runs without that column.
#   sh bench/st2_venv.sh
set -u
venv="${ST2_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/oneflow/st2-venv}"
check='import torch, sentence_transformers, sys; sys.exit(int(torch.__version__.split(".")[0]) < 2)'
if [ -x "$venv/bin/python" ] && "$venv/bin/python" -c "$check" 2>/dev/null; then
  echo "$venv/bin/python"
  exit 0
fi
torch_py=$(sh "$(dirname "$0")/torch_venv.sh" | tail -1)
if [ ! -x "$torch_py" ]; then echo "st2_venv: no PyTorch 2.x (bench/torch_venv.sh failed)" >&2; exit 1; fi
base=$("$torch_py" -c 'import sys, os; print(os.path.join(sys.base_prefix, "bin", "python3"))')
site=$("$torch_py" -c 'import site; print(site.getsitepackages()[0])')
mkdir -p "$(dirname "$venv")"
if ! "$base" -m venv "$venv" >&2; then echo "st2_venv: $base -m venv failed" >&2; exit 1; fi
own=$("$venv/bin/python" -c 'import site; print(site.getsitepackages()[0])')
echo "$site" > "$own/torch2.pth"
if ! "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps \
    $(cat "$(dirname "$0")/../spec/text/sentence_transformers.pins") numpy==1.26.4 pyyaml==6.0.2 \
    requests==2.32.3 urllib3==2.2.3 idna==3.10 certifi==2024.8.30 charset-normalizer==3.4.0 \
    pillow==11.0.0 >&2; then
  echo "st2_venv: pip install failed; no PyTorch 2.x column" >&2
  exit 1
fi
"$venv/bin/python" -c "$check" || { echo "st2_venv: the venv does not import" >&2; exit 1; }
echo "$venv/bin/python"
