#!/bin/sh
# Makes the python virtualenv the ONNX specs use to check exported files
# with onnx.checker and onnxruntime (spec/onnx/export_spec.lua finds it).
# Needs python3 with venv and access to PyPI; the specs never require it:
# without it their onnxruntime checks are pending.
#   sh spec/onnx/setup_onnxruntime.sh            # -> ~/.cache/oneflow/onnx-venv
#   ONNX_VENV=/some/dir sh spec/onnx/setup_onnxruntime.sh   (then set ONNX_PYTHON)
set -eu
venv="${ONNX_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/oneflow/onnx-venv}"
py="${PYTHON:-python3}"
if [ -x "$venv/bin/python" ] && "$venv/bin/python" -c 'import onnx, onnxruntime, numpy' 2>/dev/null; then
  echo "onnx venv ready: $venv/bin/python"
  exit 0
fi
mkdir -p "$(dirname "$venv")"
"$py" -m venv --system-site-packages "$venv"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check onnx onnxruntime numpy
"$venv/bin/python" -c 'import onnx, onnxruntime; print("onnx", onnx.__version__, "onnxruntime", onnxruntime.__version__)'
echo "onnx venv ready: $venv/bin/python"
