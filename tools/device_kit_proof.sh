#!/bin/sh
# tools/device_kit_proof.sh [KIT] [OUT] [-- CMD...] -- shows that the kit of
# tools/device_kit.sh needs nothing of this machine's Lua/OpenBLAS install:
# in a private mount namespace (unshare -m, needs root or user namespaces)
# Debian's luajit, busted, Lua modules and OpenBLAS are hidden, the kit is
# mounted at another path (/tmp/of-kit-moved.*), and there it runs
# check.sh (default) or CMD (run from the moved kit's src/ with its
# environment). PROOF_HIDE: more folders to hide (e.g. the CUDA libraries,
# to see the kit take them from a PyTorch installation). Exit 77 when the
# namespace cannot be made.
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
KIT=${1:-$ROOT/device-kit}
OUT=${2:-$ROOT/device-check-out}
[ $# -ge 2 ] && shift 2 || shift $#
[ "${1:-}" = "--" ] && shift
KIT=$(cd "$KIT" 2>/dev/null && pwd) || { echo "no kit at ${1:-device-kit} (sh tools/device_kit.sh)"; exit 1; }
[ -x "$KIT/check.sh" ] || { echo "$KIT is not a kit (sh tools/device_kit.sh)"; exit 1; }
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
unshare -m true 2>/dev/null || { echo "device_kit_proof: unshare -m not permitted here"; exit 77; }
MOVED=$(mktemp -d /tmp/of-kit-moved.XXXXXX)

# runs as root inside the new namespace; mounts vanish with it
# shellcheck disable=SC2016
unshare -m sh -eu -c '
  KIT=$1 MOVED=$2 OUT=$3
  shift 3
  mount --make-rprivate /
  hide_dir() { [ -d "$1" ] && mount -t tmpfs -o size=1m tmpfs "$1"; return 0; }
  hide_file() { [ -e "$1" ] && mount --bind /dev/null "$1"; return 0; }
  for d in /usr/share/lua /usr/local/share/lua /usr/lib/x86_64-linux-gnu/lua /usr/local/lib/lua \
           /usr/lib/x86_64-linux-gnu/openblas-pthread /usr/lib/x86_64-linux-gnu/openblas-openmp \
           /usr/lib/x86_64-linux-gnu/openblas-serial ${PROOF_HIDE:-}; do hide_dir "$d"; done
  for f in /usr/bin/luajit /usr/bin/busted /usr/local/bin/luajit /usr/local/bin/busted \
           /usr/lib/x86_64-linux-gnu/libluajit-5.1.so.2 \
           /usr/lib/x86_64-linux-gnu/libgfortran.so.5 /usr/lib/x86_64-linux-gnu/libquadmath.so.0 \
           /usr/lib/x86_64-linux-gnu/libdnnl.so.2; do hide_file "$f"; done
  for f in /usr/lib/x86_64-linux-gnu/libopenblas*; do hide_file "$f"; done
  mount --bind "$KIT" "$MOVED"
  echo "hidden: luajit $(luajit -v 2>&1 | head -1 || true) | lua modules: $(ls /usr/share/lua | wc -l) entries | openblas: $(ls /usr/lib/x86_64-linux-gnu/openblas-pthread | wc -l) files"
  echo "kit moved to $MOVED; liboneflow resolves:"
  LD_LIBRARY_PATH="$MOVED/lib" ldd "$MOVED/lib/liboneflow.so" | grep -E "openblas|gfortran|gomp|not found" || true
  if [ $# -gt 0 ]; then exec "$MOVED/run" "$@"; fi
  exec sh "$MOVED/check.sh" "$OUT"
' sh "$KIT" "$MOVED" "$OUT" "$@"
rc=$?
rmdir "$MOVED" 2>/dev/null
exit $rc
