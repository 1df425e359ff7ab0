#!/bin/sh
# The clang check (doc/reliability.md, "Toolchains"): builds the library with
# clang into a second tree (build-clang, CPU only, -Wall -Wextra -Werror so a
# warning fails), runs its C tests (ctest) and a representative subset of
# the busted specs against that library (OF_LIBRARY points Lua at it).
# A few minutes on two cores; .ci/run calls it before `make test` (whose
# summary line must come last).
#   sh tools/run_clang.sh [BUILD_DIR]
set -e
BUILD=${1:-build-clang}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
if ! command -v clang >/dev/null 2>&1; then
  echo "clang not found: install it (tools/install_deps.sh lists it)"
  exit 1
fi
JOBS=${JOBS:-2}
CC=clang cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DOF_CUDA=OFF \
  -DCMAKE_C_FLAGS=-Werror >/dev/null
cmake --build "$BUILD" -j "$JOBS"
(cd "$BUILD" && ctest --output-on-failure)
export OF_LIBRARY="$ROOT/$BUILD/liboneflow.so"
# spec/core/layers_spec.lua checks this tree's objects (a clean clone has no build/ yet)
export OF_BUILD_DIR="$BUILD"
export LUA_PATH="$ROOT/lua/?.lua;$ROOT/lua/?/init.lua;;"
# the core, tensors, autograd, nn and the graph compiler (relupool's vector
# kernels are the clang-specific code); a few minutes in all. With
# spec/core/threads_spec.lua and spec/data/faults_spec.lua: fork() after
# parallel ops with LLVM's libomp (what clang's -fopenmp links), which
# deadlocked until the library stopped calling OpenMP from its fork handler
# (core/tensor/threads.c; doc/reliability.md, "Toolchains"). Bounded, so a
# hang fails instead.
# shellcheck disable=SC2086
timeout 900 luajit "$(command -v busted)" spec/core spec/tensor spec/autograd spec/nn/conv_spec.lua \
  spec/nn/pool_spec.lua spec/graph/passes_spec.lua spec/optim/optim_spec.lua spec/data/faults_spec.lua
