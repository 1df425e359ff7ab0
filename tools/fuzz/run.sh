#!/bin/sh
# make fuzz: builds the libFuzzer harnesses (tools/fuzz/build.sh; clang,
# libclang-rt-14-dev and libomp-dev from tools/install_deps.sh) and runs
# every harness for FUZZ_TIME seconds (default 600), one after another:
#   fuzz_graph, fuzz_image, fuzz_serve (libFuzzer, ASan + UBSan, leak detection on),
#   lua_fuzz.lua safetensors | torch | pickle | t7 (LuaJIT-driven).
# Each starts from its committed seeds (tools/fuzz/corpus/NAME) plus what
# earlier runs found (build-fuzz/corpus/NAME); a crash, hang, leak or
# out-of-memory input lands in tools/fuzz/crashes/NAME/ (commit it once
# fixed: make test replays it). FUZZ_TARGETS picks harnesses.
# Prints one line per harness: name, seconds, execs, findings.
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT" || exit 1
OUT=${FUZZ_OUT:-build-fuzz}
T=${FUZZ_TIME:-600}
TARGETS=${FUZZ_TARGETS:-"graph image serve safetensors torch pickle t7 onnx"}
export LUA_PATH="$ROOT/lua/?.lua;$ROOT/lua/?/init.lua;;"
export OMP_NUM_THREADS=1
sh tools/fuzz/build.sh "$OUT" || exit 1
mkdir -p "$OUT/work"
summary="$OUT/fuzz_summary.txt"
echo "== $(date -u +%FT%TZ) FUZZ_TIME=$T" >> "$summary"
status=0
for name in $TARGETS; do
  corpus="$OUT/corpus/$name"
  crashes="tools/fuzz/crashes/$name"
  mkdir -p "$corpus" "$crashes"
  cp tools/fuzz/corpus/"$name"/* "$corpus"/ 2>/dev/null
  log="$OUT/fuzz_$name.log"
  start=$(date +%s)
  if [ -x "$OUT/fuzz_$name" ]; then
    # -rss_limit_mb: an input that needs more memory than this is a finding
    "$OUT/fuzz_$name" -max_total_time="$T" -rss_limit_mb=2048 -timeout=20 -max_len=65536 \
      -artifact_prefix="$crashes/" -print_final_stats=1 "$corpus" > "$log" 2>&1
    rc=$?
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
  else
    timeout $((T + 300)) luajit tools/fuzz/lua_fuzz.lua "$name" "$T" "$corpus" "$crashes" "$OUT/work" \
      > "$log" 2>&1
    rc=$?
    if [ $rc -gt 128 ] || [ $rc -eq 124 ]; then   # killed by a signal: keep the input it was on
      cur="$OUT/work/current.$name"
      [ -f "$cur" ] && mv "$cur" "$crashes/crash-$(md5sum "$cur" | cut -c1-16)"
    fi
    execs=$(sed -n 's/.* \([0-9]*\) execs,.*/\1/p' "$log" | tail -1)
  fi
  secs=$(( $(date +%s) - start ))
  line="$name: ${secs} s, ${execs:-?} execs, exit $rc"
  [ $rc -ne 0 ] && status=1 && line="$line (see $log and $crashes)"
  echo "$line" | tee -a "$summary"
done
exit $status
