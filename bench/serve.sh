#!/bin/sh
# serve.sh -- flow-serve's throughput and latency (doc/benchmarks.md,
# "Serving"): ResNet-18 on 3x224x224, one image per request as binary tensor
# data, driven by `hey` (Debian) at concurrency 1, 8 and 32, without and with
# dynamic batching; next to it, in the same run, the same network in PyTorch
# 2.x eager served by KServe's Python model server (a venv made here,
# ~/.cache/oneflow/kserve-venv; skipped with a message where it cannot be
# made). Prints a markdown table and the load.
#   sh bench/serve.sh [REQUESTS_PER_CLIENT (default 4) [IMAGE_SIZE (default 224)]]
# TORCH2_PYTHON: a python with PyTorch 2.x (default bench/torch_venv.sh's).
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT" || exit 1
PER=${1:-4}
SIZE=${2:-224}
. bench/serve_lib.sh
need serve.sh hey
echo "building the repository (ResNet-18 compiled for batch 1, 2, 4, 8)..." >&2
luajit bench/serve_repo.lua "$TMP/repo" 2000 "$SIZE" || exit 1
mv "$TMP/repo/body.bin" "$TMP/repo/body.len" "$TMP/repo/inproc_ms" "$TMP/"
HLEN=$(cat "$TMP/body.len")
start_serve "$TMP/repo" "$TMP/serve.log"

# kserve + PyTorch 2.x
KPORT=""
# PyTorch 2.x: TORCH2_PYTHON, or bench/torch_venv.sh's venv (made when missing)
TORCH2=${TORCH2_PYTHON:-$(sh bench/torch_venv.sh 2>/dev/null | tail -1)}
KV="${XDG_CACHE_HOME:-$HOME/.cache}/oneflow/kserve-venv"
if [ ! -x "$KV/bin/python" ] || ! "$KV/bin/python" -c 'import kserve' 2>/dev/null; then
  python3 -m venv "$KV" >&2 && "$KV/bin/python" -m pip install --quiet --disable-pip-version-check kserve >&2
fi
if [ -n "$TORCH2" ] && "$KV/bin/python" -c 'import kserve' 2>/dev/null; then
  site=$("$TORCH2" -c 'import torch, os; print(os.path.dirname(os.path.dirname(torch.__file__)))')
  KPORT=$((port + 1))
  PYTHONPATH="$site" "$KV/bin/python" bench/serve_kserve.py "$KPORT" > "$TMP/kserve.log" 2>&1 &
  pids="$pids $!"
  ok=""
  for _ in $(seq 150); do
    curl -sf "http://127.0.0.1:$KPORT/v2/models/resnet18/ready" >/dev/null && ok=1 && break
    sleep 0.2
  done
  [ -n "$ok" ] || { echo "kserve did not start: skipped" >&2; tail -5 "$TMP/kserve.log" >&2; KPORT=""; }
else
  echo "kserve or PyTorch 2.x unavailable: the KServe column is skipped" >&2
fi

# one hey run: "req/s | p50 ms | p95 ms | p99 ms | ok/n" ("-" where hey
# computes no such percentile: 0.1.4 has no 99th below 100 requests)
run() {   # url concurrency
  n=$(( $2 * PER ))
  [ "$n" -lt 100 ] && n=100   # hey computes a 99th percentile from 100 requests
  hey -n "$n" -c "$2" -t 300 -m POST -T application/octet-stream \
    -H "Inference-Header-Content-Length: $HLEN" -D "$TMP/body.bin" "$1" > "$TMP/hey.txt" 2>&1
  # (hey 0.1.4 prints its percentiles as "50%% in")
  rps=$(sed -n 's/^[[:space:]]*Requests\/sec:[[:space:]]*\([0-9.]*\).*/\1/p' "$TMP/hey.txt")
  p50=$(sed -n 's/^[[:space:]]*50%*[[:space:]]*in[[:space:]]*\([0-9.]*\) secs.*/\1/p' "$TMP/hey.txt")
  p95=$(sed -n 's/^[[:space:]]*95%*[[:space:]]*in[[:space:]]*\([0-9.]*\) secs.*/\1/p' "$TMP/hey.txt")
  p99=$(sed -n 's/^[[:space:]]*99%*[[:space:]]*in[[:space:]]*\([0-9.]*\) secs.*/\1/p' "$TMP/hey.txt")
  ok=$(sed -n 's/^ *\[200\][[:space:]]*\([0-9]*\) responses.*/\1/p' "$TMP/hey.txt")
  awk -v r="${rps:-0}" -v a="${p50:-0}" -v b="$p95" -v c="$p99" -v ok="${ok:-0}" -v n="$n" \
    'function ms(v) { return (v == "" || v + 0 == 0) ? "-" : sprintf("%.1f", v * 1000) }
     BEGIN { printf "%.1f | %.1f | %s | %s | %d/%d", r, a * 1000, ms(b), ms(c), ok, n }'
}
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "ResNet-18 on 3x${SIZE}x${SIZE}, $PER requests per client (at least 100 a run)"
echo "in-process graph, batch 1: $(cat "$TMP/inproc_ms") ms (median of 20)"
echo
# warm-up: the first runs of each server (arena layout, thread pools) are not timed
for u in "http://127.0.0.1:$port/v2/models/resnet18/infer" "http://127.0.0.1:$port/v2/models/resnet18_db/infer" \
         ${KPORT:+"http://127.0.0.1:$KPORT/v2/models/resnet18/infer"}; do
  hey -n 4 -c 1 -t 300 -m POST -T application/octet-stream -H "Inference-Header-Content-Length: $HLEN" \
    -D "$TMP/body.bin" "$u" > /dev/null 2>&1
done
echo "| server | concurrency | req/s | p50 ms | p95 ms | p99 ms | ok |"
echo "|---|---|---|---|---|---|---|"
for c in 1 8 32; do
  echo "| flow-serve | $c | $(run "http://127.0.0.1:$port/v2/models/resnet18/infer" "$c") |"
  echo "| flow-serve, dynamic batching | $c | $(run "http://127.0.0.1:$port/v2/models/resnet18_db/infer" "$c") |"
  [ -n "$KPORT" ] && echo "| KServe + PyTorch $("$TORCH2" -c 'import torch; print(torch.__version__.split("+")[0])') | $c | $(run "http://127.0.0.1:$KPORT/v2/models/resnet18/infer" "$c") |"
done
echo
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
curl -s "http://127.0.0.1:$port/metrics" | grep -E '^flow_serve_batch_executions' | sed 's/^/  /'
