#!/bin/sh
# Makes the python virtualenv with NVIDIA's Triton HTTP client
# (tritonclient[http] from PyPI) that spec/serve/serve_spec.lua drives
# flow-serve with: a client no one here wrote. Made from Debian's python3
# with its site packages (numpy); pip installs tritonclient and its HTTP
# dependencies (geventhttpclient, python-rapidjson, ...). Needs python3-venv
# and access to PyPI; without it the spec's client checks stay pending.
#   sh spec/serve/setup_tritonclient.sh   # -> ~/.cache/oneflow/tritonclient-venv
#   TRITONCLIENT_VENV=/some/dir sh spec/serve/setup_tritonclient.sh
# Prints the venv's python as its last line.
set -eu
venv="${TRITONCLIENT_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/oneflow/tritonclient-venv}"
py=/usr/bin/python3
if [ -x "$venv/bin/python" ] && "$venv/bin/python" -c 'import tritonclient.http, numpy' 2>/dev/null; then
  echo "$venv/bin/python"
  exit 0
fi
"$py" -c 'import numpy' || { echo "setup_tritonclient: $py cannot import numpy" >&2; exit 1; }
mkdir -p "$(dirname "$venv")"
"$py" -m venv --system-site-packages "$venv" >&2
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check 'tritonclient[http]' >&2
"$venv/bin/python" -c 'import tritonclient.http as h, importlib.metadata as m; print("tritonclient", m.version("tritonclient"))' >&2
echo "$venv/bin/python"
