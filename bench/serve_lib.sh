# serve_lib.sh -- what the serving benchmarks (serve.sh, serve_latency.sh,
# serve_soak.sh, serve_shm.sh) share, sourced once ROOT is set and the shell is in it: the
# build folder, LUA_PATH, a temporary folder and the processes removed at
# exit, and starting flow-serve.
BUILD=${OF_BUILD_DIR:-build}
export LUA_PATH="$ROOT/lua/?.lua;$ROOT/lua/?/init.lua;;"
TMP=$(mktemp -d)
pids=""
cleanup() { for p in $pids; do kill "$p" 2>/dev/null; done; rm -rf "$TMP"; }
trap cleanup EXIT INT TERM

# need SCRIPT TOOL...: exits with a message when a tool (a Debian package of
# that name) or the server is missing
need() {
  script=$1
  shift
  for t in "$@"; do
    command -v "$t" >/dev/null || { echo "$script: $t is not installed (apt-get install $t)"; exit 1; }
  done
  [ -x "$BUILD/flow-serve" ] || { echo "$script: $BUILD/flow-serve is not built"; exit 1; }
}

# start_serve REPO LOG: flow-serve over REPO on a free loopback port, its
# output in LOG (SERVE_ARGS: more options); sets pid and port
start_serve() {
  # shellcheck disable=SC2086
  "$BUILD/flow-serve" --model-repository "$1" --http-port 0 --http-address 127.0.0.1 ${SERVE_ARGS:-} > "$2" 2>&1 &
  pid=$!
  pids="$pids $pid"
  port=""
  for _ in $(seq 100); do
    port=$(sed -n 's/.*listening on 127.0.0.1:\([0-9]*\).*/\1/p' "$2")
    [ -n "$port" ] && return 0
    sleep 0.2
  done
  echo "flow-serve did not start"
  cat "$2"
  exit 1
}
