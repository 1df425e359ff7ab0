#!/bin/sh
# Makes the python virtualenv spec/tools/tensorboard_spec.lua reads event
# files back with (tensorboard's EventAccumulator). Needs python3 with venv
# and access to PyPI; without it the spec's read-back checks are pending.
#   sh spec/tools/setup_tensorboard.sh            # -> ~/.cache/oneflow/tb-venv
#   TB_VENV=/some/dir sh spec/tools/setup_tensorboard.sh   (then set TB_PYTHON)
set -eu
venv="${TB_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/oneflow/tb-venv}"
py="${PYTHON:-/usr/bin/python3}"
if [ -x "$venv/bin/python" ] && "$venv/bin/python" -c 'import tensorboard' 2>/dev/null; then
  echo "tensorboard venv ready: $venv/bin/python"
  exit 0
fi
mkdir -p "$(dirname "$venv")"
"$py" -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check tensorboard
"$venv/bin/python" -c 'import tensorboard; print("tensorboard", tensorboard.__version__)'
echo "tensorboard venv ready: $venv/bin/python"
