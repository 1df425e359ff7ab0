#!/usr/bin/env bash
# tools/ab_bench.sh -- A/B timing of two builds of OneFlow-Lua in one run, for
# the "no slowdown" gate (1-element add of bench/ops.lua, LeNet and ResNet-18
# training steps of bench/train.lua; our side only, no PyTorch, no doc write).
#
#   tools/ab_bench.sh BEFORE_DIR AFTER_DIR [ROUNDS]      (ROUNDS default 3)
#
# Each DIR is a checkout whose lua/ and build/liboneflow.so are used (build
# them first, e.g. `make build`; override the library with BEFORE_LIB= /
# AFTER_LIB=). Every round runs, each in a fresh luajit process:
#   (a) the 1-element add   -- one side, then the other
#   (b) LeNet + ResNet-18   -- one side, then the other
# and the side that goes first alternates from round to round. Timing code
# and model definitions come from one driver for both sides (bench/ab_step.lua
# next to this script, with its bench/lenet.lua), so only the library and the
# lua/ modules differ. Each process reports the liboneflow.so it really mapped
# (/proc/self/maps) and the oneflow/_C.lua it loaded; the run stops if either
# is not the side's own.
#
# Environment: OF_BENCH_THREADS (threads, default 2), AB_STEPS (timed steps per
# model per round, default 20 as bench/train.lua), AB_DRIVER (driver path),
# AB_MAX_OTHERS (percent: run a process again, up to 3 tries, when the rest
# of the machine used more than this share of the CPUs while it ran; unset:
# only report it, as "others" on each line).
# All figures are times: lower is better; ratio = after / before. "spread" is
# the larger of the two sides' worst/best - 1 over the rounds: a ratio inside
# it is not told apart from noise. Run on a quiet machine (the load average is
# printed per round) and with more rounds (5-9) for a 3% verdict.
set -euo pipefail

if [ $# -lt 2 ] || [ $# -gt 3 ]; then
  sed -n '2,28p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
fi

abspath() { (cd "$1" 2>/dev/null && pwd -P) || { echo "ab_bench: no directory $1" >&2; exit 1; }; }
BEFORE=$(abspath "$1") || exit 1
AFTER=$(abspath "$2") || exit 1
ROUNDS=${3:-3}
THREADS=${OF_BENCH_THREADS:-2}
STEPS=${AB_STEPS:-20}
HERE=$(cd "$(dirname "$0")/.." && pwd -P)
DRIVER=${AB_DRIVER:-$HERE/bench/ab_step.lua}
DRIVER_ROOT=$(cd "$(dirname "$DRIVER")/.." && pwd -P)   # where bench/lenet.lua is found
BEFORE_LIB=$(readlink -m "${BEFORE_LIB:-$BEFORE/build/liboneflow.so}")
AFTER_LIB=$(readlink -m "${AFTER_LIB:-$AFTER/build/liboneflow.so}")

case $ROUNDS in ''|*[!0-9]*|0) echo "ab_bench: ROUNDS must be a positive integer" >&2; exit 2;; esac
for f in "$DRIVER" "$DRIVER_ROOT/bench/lenet.lua" "$BEFORE_LIB" "$AFTER_LIB" \
         "$BEFORE/lua/oneflow/_C.lua" "$AFTER/lua/oneflow/_C.lua"; do
  [ -f "$f" ] || { echo "ab_bench: missing $f (built? see usage)" >&2; exit 1; }
done
command -v luajit >/dev/null || { echo "ab_bench: luajit not found" >&2; exit 1; }

WORK=$(mktemp -d "${TMPDIR:-/tmp}/ab_bench.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
RES=$WORK/results    # lines: side metric value round
HZ=$(getconf CLK_TCK)
NCPU=$(nproc)
MAX_OTHERS=${AB_MAX_OTHERS:-}
TIMEFORMAT='%3R %3U %3S'
: >"$WORK/others"

side_dir() { if [ "$1" = before ]; then echo "$BEFORE"; else echo "$AFTER"; fi; }
side_lib() { if [ "$1" = before ]; then echo "$BEFORE_LIB"; else echo "$AFTER_LIB"; fi; }

declare -A SHOWN=()
# CPU time (s) used by the whole machine so far: user nice system irq softirq steal
cpu_busy() { awk -v hz="$HZ" '/^cpu / {printf "%.2f\n", ($2 + $3 + $4 + $7 + $8 + $9) / hz; exit}' /proc/stat; }

# run_side SIDE MODE ROUND
run_side() {
  local side=$1 mode=$2 round=$3 dir lib out tries=0 b0 b1 others
  dir=$(side_dir "$side"); lib=$(side_lib "$side")
  out=$WORK/$side.$mode.$round.out
  while :; do
    tries=$((tries + 1))
    b0=$(cpu_busy)
    # a fresh process in an empty directory: nothing is picked up from ./
    if ! { time (cd "$WORK" && env OF_LIBRARY="$lib" \
          LUA_PATH="$dir/lua/?.lua;$dir/lua/?/init.lua;$DRIVER_ROOT/?.lua;;" \
          luajit "$DRIVER" "$mode" "$THREADS" --steps "$STEPS" >"$out" 2>&1); } 2>"$out.time"; then
      echo "ab_bench: $side $mode (round $round) failed:" >&2; cat "$out" >&2; exit 1
    fi
    b1=$(cpu_busy)
    # others: CPU time the rest of the machine used while this process ran,
    # in % of all cores over its wall time (its own user + sys taken off)
    others=$(awk -v b0="$b0" -v b1="$b1" -v n="$NCPU" '{o = (b1 - b0 - $2 - $3) / ($1 * n) * 100
             printf "%.0f\n", o < 0 ? 0 : o}' "$out.time")
    if [ -z "$MAX_OTHERS" ] || [ "$others" -le "$MAX_OTHERS" ] || [ "$tries" -ge 3 ]; then break; fi
    echo "  round $round  $side $mode: other work took ${others}% of the CPUs, running it again"
  done
  local mapped lua
  mapped=$(awk '$1 == "lib" {print $2}' "$out")
  lua=$(awk '$1 == "lua" {print $2}' "$out")
  if [ "$(readlink -f "$mapped")" != "$lib" ] || [ "$(readlink -f "$lua")" != "$(readlink -f "$dir/lua/oneflow/_C.lua")" ]; then
    echo "ab_bench: $side loaded the wrong build:" >&2; cat "$out" >&2; exit 1
  fi
  if [ -z "${SHOWN[$side]:-}" ]; then
    SHOWN[$side]=1
    printf '%-6s library %s\n%-6s lua     %s (threads %s)\n' "$side" "$mapped" "$side" "$lua" \
      "$(awk '$1 == "threads" {print $2}' "$out")"
  fi
  echo "$others" >>"$WORK/others"
  awk -v s="$side" -v r="$round" '$1 ~ /_(us|ms)$/ {print s, $1, $2, r}' "$out" | tee -a "$RES" \
    | awk -v o="$others" '{printf "  round %s  %-6s %-13s %-9s (others %s%%)\n", $4, $1, $2, $3, o}'
}

build_opts() {
  grep -hE '^(CMAKE_BUILD_TYPE|OF_CUDA|OF_SANITIZE|CMAKE_C_FLAGS):' "$1/build/CMakeCache.txt" 2>/dev/null \
    | sed 's/:[A-Z]*=/=/' | tr '\n' ' ' || true
}
describe() {  # git commit and build options of a checkout
  local d=$1 rev dirty opts
  rev=$(git -C "$d" rev-parse --short HEAD 2>/dev/null || echo '?')
  dirty=$(git -C "$d" status --porcelain --untracked-files=no 2>/dev/null | grep -q . && echo ' +uncommitted changes' || true)
  opts=$(build_opts "$d")
  echo "$d @ $rev$dirty; ${opts:-no build/CMakeCache.txt}"
}

CPU=$(lscpu 2>/dev/null | awk -F: '/^Model name/ {sub(/^[ \t]+/, "", $2); print $2; exit}')
LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
T0=$(date +%s)
echo "A/B: $ROUNDS round(s), $THREADS thread(s), $STEPS timed steps per model"
echo "before: $(describe "$BEFORE")"
echo "after:  $(describe "$AFTER")"
[ "$(build_opts "$BEFORE")" = "$(build_opts "$AFTER")" ] \
  || echo "note: the two builds' CMake options differ (see above); the figures compare builds, not only code"
[ "$BEFORE_LIB" = "$AFTER_LIB" ] && echo "(both sides use the same library: this run shows the noise level)"

for r in $(seq 1 "$ROUNDS"); do
  if [ $((r % 2)) -eq 1 ]; then order="before after"; else order="after before"; fi
  echo "-- round $r/$ROUNDS ($order; load average $(cut -d' ' -f1-3 /proc/loadavg))"
  for s in $order; do run_side "$s" add "$r"; done
  for s in $order; do run_side "$s" train "$r"; done
done
LOAD_AFTER=$(cut -d' ' -f1-3 /proc/loadavg)

echo
echo "== summary (lower is better; ratio = after / before; median of an even count = mean of the middle two)"
printf '%-13s %11s %10s %10s %10s %10s %9s %7s  %s\n' metric 'before best' 'after best' \
  'before med' 'after med' 'ratio best' 'ratio med' 'spread' 'gate (<= 1.03)'
for m in small_add_us lenet_ms resnet18_ms; do
  stats() {  # best, median and worst of side $1's values of metric $m
    awk -v s="$1" -v m="$m" '$1 == s && $2 == m {print $3}' "$RES" | sort -g \
      | awk '{v[NR] = $1} END {if (NR == 0) {print "nan nan nan"; exit}
             med = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
             printf "%.4f %.4f %.4f\n", v[1], med, v[NR]}'
  }
  read -r bb bm bw <<<"$(stats before)"
  read -r ab am aw <<<"$(stats after)"
  # spread: the larger of the two sides' worst/best - 1 over the rounds; a
  # ratio inside it is not told apart from noise (run more rounds)
  awk -v m="$m" -v bb="$bb" -v ab="$ab" -v bm="$bm" -v am="$am" -v bw="$bw" -v aw="$aw" 'BEGIN {
    rb = ab / bb; rm = am / bm
    sp = bw / bb - 1; if (aw / ab - 1 > sp) sp = aw / ab - 1
    gate = (rb <= 1.03 && rm <= 1.03) ? "within 3%" : "SLOWER by >3%"
    f = (m ~ /_us$/) ? "%10.4f" : "%10.2f"
    printf "%-13s  " f "  " f " " f " " f " %10.3f %9.3f %6.1f%%  %s\n", m, bb, ab, bm, am, rb, rm, 100 * sp, gate }'
done
echo
echo "all values (round order):"
for s in before after; do
  for m in small_add_us lenet_ms resnet18_ms; do
    printf '  %-6s %-13s %s\n' "$s" "$m" "$(awk -v s="$s" -v m="$m" '$1 == s && $2 == m {printf "%s ", $3}' "$RES")"
  done
done
echo
echo "machine: ${CPU:-unknown}; nproc $(nproc); threads used $THREADS (GOMP_SPINCOUNT ${GOMP_SPINCOUNT:-unset, so oneflow sets 10000}); $(luajit -v 2>&1 | awk '{print $1, $2; exit}')"
echo "load average (1/5/15 min): $LOAD_BEFORE before, $LOAD_AFTER after; other work during the timed processes: max $(sort -n "$WORK/others" | tail -1)% of the CPUs (see \"others\"); wall time $(( $(date +%s) - T0 )) s"
