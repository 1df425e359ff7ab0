#!/bin/sh
# Runs every test: luacheck, the busted specs and the C tests (ctest), then
# lists the skipped (pending) specs by name and prints, alone on the last
# line, "N passed, N failed, N skipped" summing busted, the mpirun specs
# (spec/dist/*_mpi.lua at 2 and 4 processes) and ctest (a luacheck finding
# counts as one failure, and so does a call into a higher layer of the C
# core, tools/check_layers.sh). Busted's TAP marks a pending spec
# "ok N - # SKIP <reason>"; it is counted as skipped, not passed.
BUILD=${1:-build}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT" || exit 1
export LUA_PATH="$ROOT/lua/?.lua;$ROOT/lua/?/init.lua;;"
status=0
skips=$(mktemp)

echo "== luacheck"
lint_fail=0
dirs=""
for d in lua spec bench examples; do [ -d "$d" ] && dirs="$dirs $d"; done
# shellcheck disable=SC2086
luacheck -q $dirs || lint_fail=1

echo "== busted"
out=$(mktemp)
# --verbose puts "# <file> @ <line>: <name>" before each result, which names
# the pending ones (TAP's SKIP line has only the reason); not echoed
# One busted process per spec directory: no directory runs on the heap the
# others left behind, and a process that dies (a segfault) loses only its
# own directory's report, which counts as a failure naming it.
for d in spec/*/; do
  d=${d%/}
  [ -n "$(find "$d" -name '*_spec.lua' | head -1)" ] || continue
  one=$(mktemp)
  luajit "$(command -v busted)" -o TAP --verbose "$d" > "$one" 2>&1
  rc=$?
  if ! grep -q '^1\.\.[0-9]' "$one"; then
    echo "not ok - busted on $d did not finish (exit $rc): a crash or a load error" >> "$one"
  fi
  tee -a "$out" < "$one" | grep -v '^# [^ ]* @ [0-9]*: '
  rm -f "$one"
done
b_pass=$(grep '^ok ' "$out" | grep -vc ' # SKIP')
b_skip=$(grep -c '^ok .* # SKIP' "$out")
b_fail=$(grep -c '^not ok ' "$out")
awk '/^# [^ ]* @ [0-9]+: /{ name = substr($0, 3) }
     /^ok [0-9]+ - .*# SKIP/{ r = $0; sub(/^ok [0-9]+ - *# SKIP */, "", r); print name " -- " r }' "$out" >> "$skips"
# a spec file that fails to load shows as an error line, not as "not ok"
grep -q '^# Errors\|error loading' "$out" && [ "$b_fail" -eq 0 ] && b_fail=1
rm -f "$out"

echo "== mpirun specs (spec/dist/*_mpi.lua)"
# Each spec file runs on every rank of `mpirun -np 2` and `-np 4`; a test
# passes when it passes on every rank. Bounded: a hung collective fails
# after OF_DIST_TIMEOUT, a hung job after `timeout`.
d_pass=0
d_fail=0
d_skip=0
if ! command -v mpirun >/dev/null 2>&1; then
  echo "mpirun not found: the distributed specs did not run"
  [ "${CI:-}" = true ] && d_fail=1
elif ls spec/dist/*_mpi.lua >/dev/null 2>&1; then
  dir=$(mktemp -d)
  for np in 2 4; do
    OF_DIST_TIMEOUT=${OF_DIST_TIMEOUT:-30} timeout 900 mpirun --allow-run-as-root --oversubscribe \
      -np "$np" sh -c 'luajit "$(command -v busted)" -o TAP -p _mpi spec/dist \
        > "$0/out.$OMPI_COMM_WORLD_RANK" 2>&1' "$dir"
    rc=$?
    plan=$(sed -n 's/^1\.\.\([0-9]*\).*/\1/p' "$dir/out.0" | head -1)
    [ -z "$plan" ] && plan=0
    # pending specs (rank 0's report) count as skipped, not passed
    np_skip=$(grep -c '^ok .* # SKIP' "$dir/out.0" 2>/dev/null)
    [ -z "$np_skip" ] && np_skip=0
    grep '^ok .* # SKIP' "$dir/out.0" 2>/dev/null | sed "s/^ok [0-9]* - *# SKIP */mpirun -np $np: /" >> "$skips"
    worst=0
    r=0
    while [ "$r" -lt "$np" ]; do
      f="$dir/out.$r"
      nf=$(grep -c '^not ok ' "$f" 2>/dev/null)
      nok=$(grep -c '^ok ' "$f" 2>/dev/null)
      [ -z "$nf" ] && nf=0
      [ -z "$nok" ] && nok=0
      # a missing or truncated report counts what it lacks as failed
      miss=$((plan - nok))
      [ "$miss" -gt "$nf" ] && nf=$miss
      [ "$nf" -gt "$worst" ] && worst=$nf
      if [ "$nf" -gt 0 ] || [ "$rc" -ne 0 ]; then
        echo "-- rank $r of $np:"
        grep -v '^ok ' "$f" | head -40
      fi
      r=$((r + 1))
    done
    [ "$plan" -eq 0 ] || [ "$rc" -ne 0 ] && [ "$worst" -eq 0 ] && worst=1
    # a pending spec some rank did not report is already counted as failed
    [ $((plan - worst - np_skip)) -lt 0 ] && np_skip=$((plan - worst))
    [ "$np_skip" -lt 0 ] && np_skip=0
    echo "mpirun -np $np: $((plan - worst - np_skip)) passed, $worst failed, $np_skip skipped (exit $rc)"
    d_pass=$((d_pass + plan - worst - np_skip))
    d_skip=$((d_skip + np_skip))
    d_fail=$((d_fail + worst))
    rm -f "$dir"/out.*
  done
  rmdir "$dir"
fi

echo "== layers (tools/check_layers.sh)"
# the C core's one-way stack: a call into a higher layer counts as one failure
layer_fail=0
sh tools/check_layers.sh "$BUILD" || layer_fail=1

echo "== ctest"
out=$(mktemp)
(cd "$BUILD" && ctest --output-on-failure 2>&1) | tee "$out"
c_total=$(sed -n 's/.*tests failed out of \([0-9]*\).*/\1/p' "$out")
c_fail=$(sed -n 's/.*, \([0-9]*\) tests failed out of.*/\1/p' "$out")
[ -z "$c_total" ] && c_total=0 && c_fail=0 && grep -q 'No tests were found' "$out" || true
[ -z "$c_fail" ] && c_fail=0
c_pass=$((c_total - c_fail))
rm -f "$out"

passed=$((b_pass + c_pass + d_pass))
failed=$((b_fail + c_fail + lint_fail + d_fail + layer_fail))
skipped=$((b_skip + d_skip))
[ "$failed" -ne 0 ] && status=1
if [ "$skipped" -ne 0 ]; then
  echo "== skipped"
  cat "$skips"
fi
rm -f "$skips"
echo "$passed passed, $failed failed, $skipped skipped"
exit $status
