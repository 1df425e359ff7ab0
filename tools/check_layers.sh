#!/bin/sh
# check_layers.sh [BUILD] -- the C core is a one-way stack: each file may
# call only its own layer and the layers below it. From `nm` over the built
# objects, lists every call from a file into a higher layer (file -> symbol
# (file)) and exits 1 if there is one. The layer of each source file is the
# table below (first matching pattern wins), bottom layer first; a core
# source that no pattern matches is an error too, so a new file must be
# placed. Calls through function pointers (the device table, the
# dispatcher's hooks that core/graph installs, backward rules run by the
# engine) do not show in `nm` and are the sanctioned ways up.
BUILD=${1:-build}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OBJ="$ROOT/$BUILD/CMakeFiles/oneflow.dir"
[ -d "$OBJ" ] || { echo "check_layers: no objects in $OBJ (build first)"; exit 1; }

# layer  pattern (paths relative to the repository root)
LAYERS='
0 storage   core/storage/*.c
1 tensor    core/tensor/*.c
2 device    core/device/dnnl.c
2 device    core/device/*.c
2 device    core/dist/comm.c
3 dispatch  core/dispatch/*.c
4 ops       core/ops/*.c
4 ops       core/autograd/rules.c
5 autograd  core/autograd/engine.c
6 graph     core/graph/*.c
6 graph     core/graph/passes/*.c
7 api       core/io/*.c
7 api       cdef.c
'
[ -n "$OF_LAYERS" ] && LAYERS=$OF_LAYERS   # a table to try (for tools and specs)

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$OBJ" || exit 1
# objects of sources that exist (a build dir may hold stale ones)
find . -name '*.o' | sed 's|^\./||; s|\.o$||' | sort | while read -r f; do
  { [ -f "$ROOT/$f" ] || [ "$f" = cdef.c ]; } && echo "$f"
done > "$tmp/files"
: > "$tmp/map"
while read -r f; do
  layer=""
  name=""
  # shellcheck disable=SC2086
  echo "$LAYERS" | while read -r l n pat; do
    [ -z "$l" ] && continue
    case "$f" in $pat) echo "$l $n"; break ;; esac
  done > "$tmp/one"
  read -r layer name < "$tmp/one"
  if [ -z "$layer" ]; then
    echo "check_layers: $f is in no layer: add it to the table in tools/check_layers.sh"
    echo "unplaced" > "$tmp/bad"
    continue
  fi
  echo "$f $layer $name" >> "$tmp/map"
  nm -g --defined-only "$f.o" | awk -v f="$f" '{print $3, f}' >> "$tmp/defs"
  nm -u "$f.o" | awk -v f="$f" '{print f, $2}' >> "$tmp/uses"
done < "$tmp/files"

awk '
  FILENAME == ARGV[1] { layer[$1] = $2; lname[$1] = $3; next }
  FILENAME == ARGV[2] { def[$1] = $2; next }
  {
    user = $1; sym = $2
    if (!(sym in def)) next
    d = def[sym]
    if (d == user || !(user in layer)) next
    if (layer[d] > layer[user]) {
      printf "%s (%s) -> %s (%s, %s)\n", user, lname[user], sym, d, lname[d]
      bad++
    }
  }
  END { exit bad > 0 }
' "$tmp/map" "$tmp/defs" "$tmp/uses" > "$tmp/out"
rc=$?
sort "$tmp/out"
n=$(wc -l < "$tmp/out")
files=$(wc -l < "$tmp/map")
if [ -f "$tmp/bad" ] || [ "$rc" -ne 0 ]; then
  echo "check_layers: $n calls into a higher layer ($files files)"
  exit 1
fi
echo "check_layers: $files files, no call into a higher layer"
