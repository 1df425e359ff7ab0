#!/bin/sh
# Makes the python virtualenv the flowtext parity specs compare with
# (spec/text/*_spec.lua read $FLOWTEXT_PYTHON, else this venv): Hugging
# Face's tokenizer and sentence-transformers on Debian's PyTorch 1.13. The
# venv is made from /usr/bin/python3 with its site packages (python3-torch,
# python3-numpy); the rest comes from PyPI without dependencies, pinned to
# versions that run on PyTorch 1.13, so that pip never pulls another
# PyTorch. The specs never require it: without it their parity checks are
# pending. Idempotent; prints the venv's python as its last line.
#   sh spec/text/setup_sentence_transformers.sh     # -> ~/.cache/oneflow/st-venv
#   ST_VENV=/some/dir sh spec/text/setup_sentence_transformers.sh
set -eu
venv="${ST_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/oneflow/st-venv}"
py=/usr/bin/python3
check='import torch, transformers, tokenizers, sentence_transformers'
if [ -x "$venv/bin/python" ] && "$venv/bin/python" -c "$check" 2>/dev/null; then
  echo "$venv/bin/python"
  exit 0
fi
"$py" -c 'import torch, numpy' || { echo "setup_sentence_transformers: $py cannot import torch and numpy" >&2; exit 1; }
mkdir -p "$(dirname "$venv")"
"$py" -m venv --system-site-packages "$venv" >&2
# the pinned stack (versions that run on PyTorch 1.13), one per line
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps \
  $(cat "$(dirname "$0")/sentence_transformers.pins") >&2
"$venv/bin/python" -c "$check"'; print("torch", torch.__version__, "transformers", transformers.__version__, "sentence-transformers", sentence_transformers.__version__)' >&2
echo "$venv/bin/python"
