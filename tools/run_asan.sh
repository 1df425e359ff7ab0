#!/bin/sh
# Runs the C tests and the busted specs against the ASan + UBSan build in
# $OF_BUILD_DIR (default build-asan). LuaJIT itself is not instrumented, so
# the sanitizer runtimes are preloaded into it.
set -e
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${OF_BUILD_DIR:-build-asan}
cd "$ROOT"
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
(cd "$BUILD" && ASAN_OPTIONS=detect_leaks=1 ctest --output-on-failure)
asan=$(gcc -print-file-name=libasan.so)
ubsan=$(gcc -print-file-name=libubsan.so)
# LuaJIT's own allocations are freed by the OS at exit: leak checking is for
# the C tests above; here ASan checks every access the library makes.
LD_PRELOAD="$asan $ubsan" ASAN_OPTIONS=detect_leaks=0:verify_asan_link_order=0 \
  OF_LIBRARY="$ROOT/$BUILD/liboneflow.so" \
  LUA_PATH="$ROOT/lua/?.lua;$ROOT/lua/?/init.lua;;" \
  luajit "$(command -v busted)"
echo "asan: no findings"
