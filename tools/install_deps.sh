#!/bin/sh
# Installs the Debian packages the build and tests need, if any is missing.
# Idempotent: with everything present it only checks.
set -e
PKGS="build-essential cmake pkg-config luajit libluajit-5.1-dev lua-busted lua-check
libopenblas-dev zlib1g-dev libjpeg-dev libpng-dev dataset-fashion-mnist
libopenmpi-dev openmpi-bin clang libomp-14-dev"
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
