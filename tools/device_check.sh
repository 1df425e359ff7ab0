#!/bin/sh
# tools/device_check.sh [OUT] -- the GPU check, in at most ~8 minutes, from a
# kit made by tools/device_kit.sh (KIT/check.sh runs this copy) or from a
# checkout with a CUDA build. Writes OUT/check.log (everything printed) and
# OUT/figures.json; OUT defaults to $OUT, else ./device-check-out.
#
#  1. the environment (tools/gpu_env.lua): why CUDA is unusable if it is,
#     runtime / driver / cuBLAS / cuDNN (and the CUDA cuDNN was built for) /
#     NCCL versions and files, nvidia-smi;
#  2. each spec file of spec/cuda and every other spec with a CUDA variant,
#     each in its own process (one illegal address poisons a CUDA context),
#     with CUDA_LAUNCH_BLOCKING=1 (a fault names its kernel);
#  3. spec/cuda again without it (asynchronous launches, streams, graphs);
#  4. compute-sanitizer memcheck on a subset, if the machine has it;
#  5. multi-rank NCCL specs: only with mpirun and >= 2 GPUs (else skipped);
#  6. bench/cuda.lua and bench/cuda_torch.py (the machine's PyTorch on the
#     same workloads), side by side in figures.json.
# Without a GPU it says "no GPU" and runs the CPU side of the same specs.
# Environment: CHECK_BUDGET (seconds, default 470), PYTHON (default python3),
# CHECK_QUICK=0 for full-length benchmarks.
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
SRC=$(cd "$HERE/.." && pwd)
if [ -f "$SRC/../env.sh" ] && [ -x "$SRC/../bin/luajit" ]; then
  KIT=$(cd "$SRC/.." && pwd)
  export KIT
  # shellcheck disable=SC1091
  . "$KIT/env.sh"
  BUSTED="$KIT/bin/busted"
  MODE="kit $KIT"
else
  export LUA_PATH="$SRC/lua/?.lua;$SRC/lua/?/init.lua;$SRC/?.lua;;"
  BUSTED=$(command -v busted)
  MODE="checkout $SRC"
fi
PY=${PYTHON:-python3}
cd "$SRC" || exit 1

OUTDIR=${1:-${OUT:-$PWD/device-check-out}}
mkdir -p "$OUTDIR" || exit 1
OUTDIR=$(cd "$OUTDIR" && pwd)
LOG="$OUTDIR/check.log"
: > "$LOG"
BUDGET=${CHECK_BUDGET:-470}
START=$(date +%s)
QUICK=${CHECK_QUICK:-1}
[ "$QUICK" = 1 ] && QFLAG=--quick || QFLAG=

say() { echo "$*" | tee -a "$LOG"; }
left() { echo $((BUDGET - ($(date +%s) - START))); }
# run LIMIT NAME CMD...: bounded by LIMIT and by what is left of the budget;
# output to the log; the exit status in $RC (124: timed out, 125: no time)
run() {
  lim=$1 name=$2
  shift 2
  l=$(left)
  [ "$l" -lt "$lim" ] && lim=$l
  if [ "$lim" -lt 5 ]; then
    say "-- $name: skipped, the ${BUDGET}s budget is spent"
    RC=125
    return
  fi
  t0=$(date +%s)
  { timeout -k 5 "$lim" "$@" 2>&1; echo $? > "$OUTDIR/.rc"; } | tee -a "$LOG" > "$OUTDIR/.last"
  RC=$(cat "$OUTDIR/.rc")
  say "-- $name: exit $RC in $(($(date +%s) - t0))s$([ "$RC" = 124 ] && echo " (timed out after ${lim}s)")"
}

say "== device_check: $MODE; $(date -u +%Y-%m-%dT%H:%M:%SZ); budget ${BUDGET}s"
[ -f "${KIT:-/nonexistent}/MANIFEST" ] && sed 's/^/   /' "$KIT/MANIFEST" | tee -a "$LOG" > /dev/null

say "== 1. environment"
if command -v nvidia-smi > /dev/null 2>&1; then
  run 20 nvidia-smi nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv
else
  say "nvidia-smi: not found"
fi
run 60 gpu_env luajit tools/gpu_env.lua "$OUTDIR/env.json"
cat "$OUTDIR/.last"
GPUS=$(sed -n 's/^devices: *//p' "$OUTDIR/.last" | head -1)
[ -z "$GPUS" ] && GPUS=0
if [ "$GPUS" -gt 0 ]; then
  say "GPU: $GPUS device(s)"
else
  say "no GPU: $(sed -n 's/^why unavailable: *//p' "$OUTDIR/.last" | head -1) -- running the CPU side of the specs"
fi

# spec files: spec/cuda, then every other spec that has a CUDA variant
SPECS=$(ls spec/cuda/*_spec.lua)
OTHERS=$(grep -l "cuda.is_available()\|to('cuda')" spec/*/*_spec.lua | grep -v '^spec/cuda/')
RESULTS="$OUTDIR/.results"
: > "$RESULTS"
spec_run() {   # PASS FILE [ENV...]: one busted process, TAP counted
  pass=$1 f=$2
  shift 2
  run 90 "$pass $f" env "$@" luajit "$BUSTED" -o TAP "$f"
  ok=$(grep -c '^ok ' "$OUTDIR/.last" | tr -d ' ')
  skip=$(grep -c '^ok .*# SKIP' "$OUTDIR/.last" | tr -d ' ')
  bad=$(grep -c '^not ok ' "$OUTDIR/.last" | tr -d ' ')
  [ "$RC" != 0 ] && [ "$bad" = 0 ] && bad=1   # a crash or a load error
  echo "$pass $f $((ok - skip)) $bad $skip $RC" >> "$RESULTS"
}
say "== 2. specs with CUDA_LAUNCH_BLOCKING=1, one process each"
# the doc snippets: only the GPU pages (all of doc/ takes minutes)
export OF_SNIPPET_FILES="doc/cuda.md doc/gpu.md doc/amp.md"
for f in $SPECS $OTHERS; do spec_run blocking "$f" CUDA_LAUNCH_BLOCKING=1; done
if [ "$GPUS" -gt 0 ]; then
  say "== 3. spec/cuda with asynchronous launches"
  for f in $SPECS; do spec_run async "$f"; done
  say "== 4. compute-sanitizer"
  CS=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer \
       /usr/local/cuda/compute-sanitizer/compute-sanitizer 2>/dev/null | head -1)
  if [ -n "$CS" ]; then
    for f in spec/cuda/index_spec.lua spec/cuda/nn_spec.lua; do
      run 100 "memcheck $f" "$CS" --tool memcheck --error-exitcode 99 \
        luajit "$BUSTED" -o TAP "$f"
      echo "memcheck $f - - - $RC" >> "$RESULTS"
    done
  else
    say "compute-sanitizer: not found, skipped"
  fi
  say "== 5. multi-rank NCCL"
  if [ "$GPUS" -lt 2 ]; then
    say "skipped: $GPUS GPU(s); NCCL between ranks needs one GPU per process"
  elif ! command -v mpirun > /dev/null 2>&1; then
    say "skipped: no mpirun on this machine"
  else
    run 90 "nccl_mpi -np 2" mpirun --allow-run-as-root -np 2 luajit "$BUSTED" -o TAP \
      -p _mpi spec/dist/nccl_mpi.lua
    echo "mpi spec/dist/nccl_mpi.lua - - - $RC" >> "$RESULTS"
  fi
else
  say "== 3-5. skipped: no GPU"
fi

say "== 6. benchmarks"
run 150 bench/cuda.lua luajit bench/cuda.lua $QFLAG --json "$OUTDIR/bench_oneflow.json"
run 120 bench/cuda_torch.py "$PY" bench/cuda_torch.py $QFLAG --json "$OUTDIR/bench_torch.json"

# figures.json: the environment, each spec run, and both benchmarks
{
  printf '{"env": '
  cat "$OUTDIR/env.json" 2>/dev/null || printf '{}'
  printf ', "elapsed_s": %d, "specs": [' $(($(date +%s) - START))
  sep=""
  while read -r pass f ok bad skip rc; do
    printf '%s{"pass": "%s", "file": "%s", "passed": "%s", "failed": "%s", "skipped": "%s", "exit": %s}' \
      "$sep" "$pass" "$f" "$ok" "$bad" "$skip" "$rc"
    sep=", "
  done < "$RESULTS"
  printf '], "oneflow": '
  cat "$OUTDIR/bench_oneflow.json" 2>/dev/null || printf 'null'
  printf ', "torch": '
  cat "$OUTDIR/bench_torch.json" 2>/dev/null || printf 'null'
  printf '}\n'
} > "$OUTDIR/figures.json.tmp" && mv "$OUTDIR/figures.json.tmp" "$OUTDIR/figures.json"

say "== summary"
awk '{ printf "%-9s %-40s passed %s failed %s skipped %s exit %s\n", $1, $2, $3, $4, $5, $6 }' \
  "$RESULTS" | tee -a "$LOG"
fails=$(awk '$6 != 0 || ($4 != "-" && $4 > 0) { n++ } END { print n + 0 }' "$RESULTS")
if [ -s "$OUTDIR/bench_oneflow.json" ] && [ -s "$OUTDIR/bench_torch.json" ] &&
   command -v "$PY" > /dev/null 2>&1; then
  "$PY" - "$OUTDIR/bench_oneflow.json" "$OUTDIR/bench_torch.json" <<'EOF' | tee -a "$LOG"
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
fa, fb = a.get("figures", {}), b.get("figures", {})
if fa and fb:
    print("| workload | oneflow ms | torch ms | torch/oneflow |")
    for k in fa:
        if k in fb and fa[k].get("ms") and fb[k].get("ms"):
            print("| %s | %.3f | %.3f | %.2f |" % (k, fa[k]["ms"], fb[k]["ms"], fb[k]["ms"] / fa[k]["ms"]))
EOF
fi
rm -f "$OUTDIR/.rc" "$OUTDIR/.last" "$OUTDIR/.results"
say "device_check: $fails failing run(s), $(($(date +%s) - START))s; log $LOG, figures $OUTDIR/figures.json"
[ "$fails" -eq 0 ]
