#!/bin/sh
# Installs the Debian packages the build and tests need, if any is missing.
# Idempotent: with everything present it only checks.
set -e
PKGS="build-essential cmake pkg-config luajit libluajit-5.1-dev lua-busted lua-check
libopenblas-dev libdnnl-dev zlib1g-dev libjpeg-dev libpng-dev dataset-fashion-mnist
libopenmpi-dev openmpi-bin libreadline-dev lua-argparse lua-ldoc valgrind graphviz
clang libclang-rt-14-dev libomp-dev libmicrohttpd-dev hey wrk curl iproute2"
# CI (CI=true, as .ci/run sets it) also installs what the PyTorch-parity specs
# compare with, so that none of them is pending there: Debian's PyTorch and
# torchvision (about 1 GB with their dependencies; `make test` on a fresh
# machine leaves those specs pending instead), and venv for the timm venv
# (spec/vision/setup_timm.sh).
if [ "${CI:-}" = true ]; then
  PKGS="$PKGS python3-torch python3-torchvision python3-venv python3-pip"
fi
missing=""
for p in $PKGS; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
echo "installing:$missing"
SUDO=""
if [ "$(id -u)" != 0 ]; then
  if command -v sudo >/dev/null; then SUDO=sudo; else
    echo "missing packages:$missing -- run as root or install them" >&2; exit 1; fi
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
# shellcheck disable=SC2086
$SUDO apt-get install -y -q --no-install-recommends $missing
