#!/bin/sh
# Runs every test: luacheck, the busted specs and the C tests (ctest), then
# prints one line "N passed, N failed" summing busted and ctest (a luacheck
# finding counts as one failure).
BUILD=${1:-build}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT" || exit 1
export LUA_PATH="$ROOT/lua/?.lua;$ROOT/lua/?/init.lua;;"
status=0

echo "== luacheck"
lint_fail=0
dirs=""
for d in lua spec bench examples; do [ -d "$d" ] && dirs="$dirs $d"; done
# shellcheck disable=SC2086
luacheck -q $dirs || lint_fail=1

echo "== busted"
out=$(mktemp)
luajit "$(command -v busted)" -o TAP 2>&1 | tee "$out"
b_pass=$(grep -c '^ok ' "$out")
b_fail=$(grep -c '^not ok ' "$out")
# a spec file that fails to load shows as an error line, not as "not ok"
grep -q '^# Errors\|error loading' "$out" && [ "$b_fail" -eq 0 ] && b_fail=1
rm -f "$out"

echo "== ctest"
out=$(mktemp)
(cd "$BUILD" && ctest --output-on-failure 2>&1) | tee "$out"
c_total=$(sed -n 's/.*tests failed out of \([0-9]*\).*/\1/p' "$out")
c_fail=$(sed -n 's/.*, \([0-9]*\) tests failed out of.*/\1/p' "$out")
[ -z "$c_total" ] && c_total=0 && c_fail=0 && grep -q 'No tests were found' "$out" || true
[ -z "$c_fail" ] && c_fail=0
c_pass=$((c_total - c_fail))
rm -f "$out"

passed=$((b_pass + c_pass))
failed=$((b_fail + c_fail + lint_fail))
[ "$failed" -ne 0 ] && status=1
echo "$passed passed, $failed failed"
exit $status
