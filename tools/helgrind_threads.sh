#!/bin/sh
# ctest test_graph_threads_helgrind: test_graph_threads under Valgrind's
# Helgrind (a data race, a lock order violation or a misuse of pthreads is
# an error). Exits 77, which ctest counts as skipped, without valgrind.
# Usage: helgrind_threads.sh BIN [threads [calls]]
BIN=$1
THREADS=${2:-4}
CALLS=${3:-10}
if ! command -v valgrind >/dev/null 2>&1; then
  echo "valgrind not found: the Helgrind run of test_graph_threads is skipped (apt-get install valgrind)"
  exit 77
fi
# Valgrind has no AVX-512: OpenBLAS runs other kernels than the native run
# that wrote the batch-2 reference, so that one comparison is to 1e-5
OF_THREADS_RTOL=1e-5 exec valgrind --tool=helgrind --error-exitcode=3 -q "$BIN" "$THREADS" "$CALLS"
