#!/bin/sh
# serve_latency.sh -- what flow-serve adds to a request at concurrency 1
# (doc/benchmarks.md, "Serving: latency at concurrency 1"). Two models with
# ResNet-18's input and output sizes, one image per request as binary tensor
# data: `thin` (a graph that computes almost nothing, so the request time is
# the server's own cost: HTTP, parsing, the hand-over to the instance thread,
# the reply) and ResNet-18. `wrk` (Debian) drives each with one connection
# for SECONDS seconds, ROUNDS rounds alternating; its p50 is compared with
# the same graph's in-process time (nn.Graph call from Lua, median).
#   sh bench/serve_latency.sh [SECONDS (default 10) [ROUNDS (default 3)]]
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT" || exit 1
SECS=${1:-10}
ROUNDS=${2:-3}
. bench/serve_lib.sh
need serve_latency.sh wrk
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
luajit bench/serve_latency_repo.lua "$TMP/repo" || exit 1
start_serve "$TMP/repo" "$TMP/serve.log"
# wrk's request: the body file and its binary-data header
cat > "$TMP/post.lua" <<LUA
local f = assert(io.open("$TMP/repo/body.bin", "rb"))
wrk.method = "POST"
wrk.body = f:read("*a")
f:close()
wrk.headers["Content-Type"] = "application/octet-stream"
wrk.headers["Inference-Header-Content-Length"] = "$(cat "$TMP/repo/body.len")"
done = function(summary, latency)
  io.write(string.format("RESULT %d %d %.1f\n", summary.requests,
    summary.errors.status + summary.errors.connect + summary.errors.read + summary.errors.write
    + summary.errors.timeout, latency:percentile(50)))
end
LUA
p50s() {   # model -> "requests errors p50_us" per round, appended to $TMP/<model>.txt
  wrk -t1 -c1 -d"${SECS}s" -s "$TMP/post.lua" "http://127.0.0.1:$port/v2/models/$1/infer" \
    | sed -n 's/^RESULT //p' >> "$TMP/$1.txt"
}
for m in thin resnet18; do wrk -t1 -c1 -d2s -s "$TMP/post.lua" "http://127.0.0.1:$port/v2/models/$m/infer" >/dev/null; done
for _ in $(seq "$ROUNDS"); do p50s thin; p50s resnet18; done
echo "one connection, ${SECS} s x $ROUNDS rounds per model, alternating; p50 = median of the rounds' p50s"
echo
echo "| model | in-process ms | flow-serve p50 ms | added ms | requests | errors |"
echo "|---|---|---|---|---|---|"
for m in thin resnet18; do
  sort -n -k3 "$TMP/$m.txt" | awk -v m="$m" -v ip="$(cat "$TMP/repo/$m.ms")" '
    { req += $1; err += $2; p[NR] = $3 }
    END { med = p[int((NR + 1) / 2)] / 1000;
          printf "| %s | %.3f | %.3f | %+.3f | %d | %d |\n", m, ip, med, med - ip, req, err }'
done
echo
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
