#!/bin/sh
# Thread safety under ThreadSanitizer (doc/reliability.md, "Thread safety"):
# builds the library and spec/c/test_graph_threads.c with clang
# -fsanitize=thread into build-tsan (CPU only, no oneDNN), then runs the C
# host program: THREADS threads x CALLS calls of one compiled graph (the
# nn.Graph that spec/c/graph_threads_save.lua saves, loaded through
# of_graph_load, when a normal build can save it; else the MLP the program
# traces itself), each thread also tracing and running a graph of its own,
# eager autograd steps on its own tensors and an error of its own; every
# output must equal the single-threaded one, and TSan must report nothing
# (halt_on_error, exit code 66).
# OpenMP teams run one thread (OMP_NUM_THREADS=1): LLVM's libomp is not
# built with TSan, so the hand-offs inside a parallel region are invisible to
# it and would be reported; the host threads -- what the server uses and what
# this checks -- are all instrumented.
#   sh tools/tsan_threads.sh [THREADS [CALLS]]     (make tsan: 8 1000)
set -e
THREADS=${1:-8}
CALLS=${2:-1000}
BUILD=${TSAN_BUILD:-build-tsan}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
if ! command -v clang >/dev/null 2>&1; then
  echo "clang not found: install it (tools/install_deps.sh lists it)"
  exit 1
fi
CC=clang cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DOF_CUDA=OFF \
  -DOF_WITH_DNNL=OFF -DCMAKE_C_FLAGS="-fsanitize=thread -include $ROOT/tools/tsan_prelude.h -fno-omit-frame-pointer" \
  -DCMAKE_EXE_LINKER_FLAGS=-fsanitize=thread -DCMAKE_SHARED_LINKER_FLAGS=-fsanitize=thread >/dev/null
cmake --build "$BUILD" -j "${JOBS:-2}" --target test_graph_threads
GRAPH=
SAVE_LIB=${SAVE_LIB:-$ROOT/build/liboneflow.so}
if [ -f "$SAVE_LIB" ] && command -v luajit >/dev/null 2>&1; then
  GRAPH="$ROOT/$BUILD/graph_threads.ofg"
  OF_LIBRARY="$SAVE_LIB" LUA_PATH="$ROOT/lua/?.lua;$ROOT/lua/?/init.lua;;" \
    luajit spec/c/graph_threads_save.lua "$GRAPH" >/dev/null
fi
export OF_THREADS_GRAPH="$GRAPH"
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
export TSAN_OPTIONS="halt_on_error=1 exitcode=66 second_deadlock_stack=1 ${TSAN_OPTIONS:-}"
start=$(date +%s)
"$BUILD/test_graph_threads" "$THREADS" "$CALLS"
echo "tsan_threads: $THREADS threads x $CALLS calls, no ThreadSanitizer report ($(( $(date +%s) - start )) s)"
