#!/bin/sh
# serve_shm.sh -- what Triton's system shared memory saves a local client
# (doc/benchmarks.md, "Serving: shared memory"): the `thin` graph of
# serve_latency.sh (ResNet-18's input and output, almost no compute), one
# tritonclient connection, the image as binary tensor data over HTTP against
# the image in a shared memory region (and the output written into one),
# rounds alternating; median request time per round.
#   sh bench/serve_shm.sh [ROUNDS (default 3) [REQUESTS (default 500)]]
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT" || exit 1
ROUNDS=${1:-3}
N=${2:-500}
. bench/serve_lib.sh
need serve_shm.sh
PY=$(sh spec/serve/setup_tritonclient.sh | tail -n 1) || exit 1
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
luajit bench/serve_latency_repo.lua "$TMP/repo" || exit 1
SERVE_ARGS=--allow-client-shm=true start_serve "$TMP/repo" "$TMP/serve.log"
"$PY" bench/serve_shm.py "127.0.0.1:$port" thin "$ROUNDS" "$N"
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
