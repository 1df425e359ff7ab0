#!/bin/sh
# serve_soak.sh -- flow-serve under a long load (doc/benchmarks.md, "Serving"):
# an MLP (16-32-4, compiled for batch 1, 2, 4) served from a fresh
# repository, 10,000 warm-up requests then N (default 100,000) JSON requests
# at concurrency 8 with `hey`; prints the status counts, the server's
# failure counter and its resident memory after the warm-up and at the end.
#   sh bench/serve_soak.sh [N]
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT" || exit 1
N=${1:-100000}
. bench/serve_lib.sh
need serve_soak.sh hey
luajit -e "
local flow = require 'oneflow'
local nn = flow.nn
flow.manual_seed(0)
local m = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
m:eval()
local G = nn.Graph:subclass('Soak')
function G:__init(mm) nn.Graph.__init(self); self.m = mm end
function G:build(x) return self.m(x) end
local g = G(m)
for _, b in ipairs({1, 2, 4}) do g(flow.randn(b, 16)) end
os.execute('mkdir -p $TMP/repo/mlp/1')
g:save('$TMP/repo/mlp/1/model.ofg')" || exit 1
printf '{"inputs":[{"name":"INPUT__0","shape":[1,16],"datatype":"FP32","data":[%s]}]}' \
  "$(seq -s, 0 15)" > "$TMP/body.json"
start_serve "$TMP/repo" "$TMP/log"
URL="http://127.0.0.1:$port/v2/models/mlp/infer"
rss() { sed -n 's/^VmRSS:[[:space:]]*//p' "/proc/$pid/status"; }
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
hey -n 10000 -c 8 -m POST -T application/json -D "$TMP/body.json" "$URL" > /dev/null
echo "RSS after 10,000 warm-up requests: $(rss)"
hey -n "$N" -c 8 -m POST -T application/json -D "$TMP/body.json" "$URL" > "$TMP/hey.txt"
grep -E 'Requests/sec|^[[:space:]]*5?0%* in|^[[:space:]]*99%* in|^[[:space:]]*\[[0-9]+\][[:space:]]+[0-9]+ responses' "$TMP/hey.txt"
echo "RSS after $N more: $(rss)"
curl -s "http://127.0.0.1:$port/metrics" | grep -E '^nv_inference_request_(success|failure)'
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
