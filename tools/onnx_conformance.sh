#!/bin/sh
# ONNX's own operator conformance suite against flow.onnx.load (doc/onnx.md,
# "Conformance"): every onnx/backend/test/data/node case of the onnx 1.17
# wheel from PyPI (fetched once into ~/.cache/oneflow/onnx-1.17, never
# committed). Each case runs under tools/onnx_conformance.lua, which records
# a START line before a case and its result after; a case that kills the
# process is recorded as a crash ('fail') and the run goes on with the next.
#   sh tools/onnx_conformance.sh                 # all cases
#   sh tools/onnx_conformance.sh --doc           # all cases, and rewrite doc/onnx.md's table
#   sh tools/onnx_conformance.sh --fetch         # only fetch and unpack the cases
#   sh tools/onnx_conformance.sh -n 60           # about 60 cases spread over the suite
#   sh tools/onnx_conformance.sh test_abs test_gemm_default_no_bias   # named cases
# Prints pass/fail/unsupported per op, then as the last line
#   conformance: P passed, F failed, U unsupported of T
# ONNX_NODE_DIR=/path/to/node uses an unpacked suite instead of the wheel.
set -eu
here=$(cd "$(dirname "$0")/.." && pwd)
cache="${XDG_CACHE_HOME:-$HOME/.cache}/oneflow/onnx-1.17"
subset=0
doc=0
fetch=0
case "${1:-}" in
  -n) subset=$2; shift 2 ;;
  --doc) doc=1; shift ;;
  --fetch) fetch=1; shift ;;
esac

node="${ONNX_NODE_DIR:-$cache/onnx/backend/test/data/node}"
if [ ! -d "$node" ]; then
  mkdir -p "$cache"
  if ! ls "$cache"/onnx-1.17.0-*.whl >/dev/null 2>&1; then
    py=python3
    for c in "${ONNX_PYTHON:-}" "${XDG_CACHE_HOME:-$HOME/.cache}/oneflow/onnx-venv/bin/python"; do
      if [ -n "$c" ] && [ -x "$c" ] && "$c" -m pip --version >/dev/null 2>&1; then py=$c; break; fi
    done
    # the wheel only (--no-deps): its test data is all we read
    "$py" -m pip download --quiet --disable-pip-version-check --no-deps \
      --only-binary=:all: --python-version 3.11 --platform manylinux2014_x86_64 \
      onnx==1.17.0 -d "$cache" || { echo "onnx_conformance: cannot download the onnx 1.17 wheel" >&2; exit 2; }
  fi
  whl=$(ls "$cache"/onnx-1.17.0-*.whl | head -1)
  python3 - "$whl" "$cache" <<'EOF'
import sys, zipfile
z = zipfile.ZipFile(sys.argv[1])
z.extractall(sys.argv[2], [n for n in z.namelist() if n.startswith('onnx/backend/test/data/node/')])
EOF
fi

[ "$fetch" = 1 ] && { echo "onnx 1.17 node cases: $node"; exit 0; }

export LUA_PATH="$here/lua/?.lua;$here/lua/?/init.lua;${LUA_PATH:-;}"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
res="$tmp/results"
: > "$res"
if [ "$#" -gt 0 ]; then
  printf '%s\n' "$@" > "$tmp/cases"
else
  ls -1 "$node" | grep '^test_' > "$tmp/cases"
  if [ "$subset" -gt 0 ]; then
    total=$(wc -l < "$tmp/cases")
    step=$(( (total + subset - 1) / subset ))
    awk -v s="$step" 'NR % s == 1 || s == 1' "$tmp/cases" > "$tmp/sub"
    mv "$tmp/sub" "$tmp/cases"
  fi
fi
want=$(wc -l < "$tmp/cases")
# restart after a crash: the runner skips cases already recorded
tries=0
while :; do
  # shellcheck disable=SC2046
  luajit "$here/tools/onnx_conformance.lua" "$node" "$res" $(cat "$tmp/cases") \
    > "$tmp/log" 2>&1 || true
  got=$(grep -vc '^START ' "$res" || true)
  [ "$got" -ge "$want" ] && break
  tries=$((tries + 1))
  if [ "$tries" -gt "$want" ]; then echo "onnx_conformance: runner keeps failing:" >&2; cat "$tmp/log" >&2; exit 2; fi
done

grep -v '^START ' "$res" > "$tmp/final"
# per op: pass / fail / unsupported
awk '{ op = $3; n[op]++; if ($1 == "pass") p[op]++; else if ($1 == "fail") f[op]++; else u[op]++ }
     END { for (o in n) printf "%-32s %4d pass %4d fail %4d unsupported\n", o, p[o], f[o], u[o] }' \
  "$tmp/final" | sort > "$tmp/per_op"
cat "$tmp/per_op"
if [ -n "${ONNX_CONFORMANCE_DETAILS:-}" ]; then cp "$tmp/final" "$ONNX_CONFORMANCE_DETAILS"; fi
P=$(grep -c '^pass ' "$tmp/final" || true)
F=$(grep -c '^fail ' "$tmp/final" || true)
U=$(grep -c '^unsupported ' "$tmp/final" || true)
T=$((P + F + U))
line="conformance: $P passed, $F failed, $U unsupported of $T"

# the table in doc/onnx.md (--doc)
if [ "$doc" = 1 ]; then
  doc="$here/doc/onnx.md"
  {
    echo "<!-- conformance table: written by tools/onnx_conformance.sh -->"
    echo "\`$line\` (onnx 1.17 node cases; rtol 1e-3, atol 1e-5)."
    echo
    echo "| op | pass | fail | unsupported | why (first failing or unsupported case) |"
    echo "| --- | --- | --- | --- | --- |"
    awk '{ op = $3; n[op]++; if ($1 == "pass") p[op]++; else if ($1 == "fail") f[op]++; else u[op]++
           if ($1 != "pass" && !(op in why)) { m = ""; for (i = 4; i <= NF; i++) m = m " " $i;
             gsub(/\|/, "/", m); why[op] = $2 ":" substr(m, 1, 140) } }
         END { for (o in n) printf "| %s | %d | %d | %d | %s |\n", o, p[o], f[o], u[o], why[o] }' \
      "$tmp/final" | sort
    echo "<!-- end of conformance table -->"
  } > "$tmp/table"
  python3 - "$doc" "$tmp/table" <<'EOF'
import sys
doc, table = sys.argv[1], open(sys.argv[2]).read()
s = open(doc).read()
a = s.find('<!-- conformance table')
b = s.find('<!-- end of conformance table -->')
if a < 0 or b < 0:
    s = s.rstrip('\n') + '\n\n' + table
else:
    s = s[:a] + table + s[b + len('<!-- end of conformance table -->\n'):]
tmp = doc + '.tmp'
open(tmp, 'w').write(s)
import os
os.replace(tmp, doc)
EOF
fi
echo "$line"
