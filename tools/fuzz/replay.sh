#!/bin/sh
# Replays every committed seed (tools/fuzz/corpus/NAME) and past crash
# (tools/fuzz/crashes/NAME) through the normal loaders, each harness in its
# own process: every file must load or fail with a clean error, never crash
# or hang. Quick (seconds); make test runs it through
# spec/io/fuzz_regress_spec.lua. No clang build needed; where one exists
# (build-fuzz/fuzz_*), the libFuzzer harnesses replay their files as well.
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT" || exit 1
export LUA_PATH="$ROOT/lua/?.lua;$ROOT/lua/?/init.lua;;"
export OMP_NUM_THREADS=1
status=0
for name in graph image safetensors torch pickle t7 onnx; do
  files=$(find tools/fuzz/corpus/"$name" tools/fuzz/crashes/"$name" -type f 2>/dev/null | sort)
  [ -z "$files" ] && continue
  # shellcheck disable=SC2086
  timeout 120 luajit tools/fuzz/lua_fuzz.lua "$name" -replay $files > /tmp/replay.$$ 2>&1
  rc=$?
  if [ $rc -ne 0 ]; then
    status=1
    echo "replay $name: exit $rc; last file: $(sed -n 's/^FILE //p' /tmp/replay.$$ | tail -1)"
    grep -v '^FILE ' /tmp/replay.$$ | tail -5
  else
    tail -1 /tmp/replay.$$
  fi
  rm -f /tmp/replay.$$
  # with a clang build (make fuzz), the libFuzzer harness too: it also runs
  # the graphs that load
  bin="${FUZZ_OUT:-build-fuzz}/fuzz_$name"
  if [ -x "$bin" ]; then
    # shellcheck disable=SC2086
    if timeout 120 "$bin" $files > /tmp/replay.$$ 2>&1; then
      echo "fuzz_$name: replayed $(echo "$files" | wc -l) files"
    else
      status=1
      echo "fuzz_$name: failed:"
      grep -E 'ERROR|runtime error|SUMMARY|Running:' /tmp/replay.$$ | tail -5
    fi
    rm -f /tmp/replay.$$
  fi
done
exit $status
