#!/bin/sh
# Builds the libFuzzer harnesses (tools/fuzz/*.c) with clang, ASan and UBSan:
# the C core is compiled once into $OUT/liboneflow_fuzz.a (coverage
# instrumented), each harness links it with -fsanitize=fuzzer.
#   sh tools/fuzz/build.sh [OUT]      (default build-fuzz)
# The Lua loaders are fuzzed by tools/fuzz/lua_fuzz.lua (no build step).
set -e
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${1:-$ROOT/build-fuzz}
CC=${FUZZ_CC:-clang}
JOBS=${JOBS:-2}
mkdir -p "$OUT/obj"
CBLAS=
for d in /usr/include/x86_64-linux-gnu/openblas-pthread /usr/include/openblas; do
  [ -f "$d/cblas.h" ] && CBLAS="-I$d" && break
done
SAN="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
# -O1 -g: fast enough to fuzz, readable stack traces
CFLAGS="-std=gnu11 -O1 -g $SAN -fsanitize=fuzzer-no-link -fopenmp -I$ROOT/core/include -I$ROOT/core $CBLAS
  -DOF_HAVE_JPEG -DOF_HAVE_PNG -Wno-unused-parameter -Wno-unknown-pragmas -Wno-unknown-warning-option"
# the FFI cdef text (of_cdef) is part of the library
if [ ! -f "$OUT/cdef.c" ] || [ "$ROOT/core/include/oneflow/oneflow.h" -nt "$OUT/cdef.c" ]; then
  "$CC" -O1 -o "$OUT/embed_cdef" "$ROOT/tools/embed_cdef.c"
  "$OUT/embed_cdef" "$ROOT/core/include/oneflow/oneflow.h" "$OUT/cdef.c"
fi
SRCS=$(cd "$ROOT" && ls core/storage/*.c core/tensor/*.c core/device/*.c core/dispatch/*.c \
  core/autograd/*.c core/ops/*.c core/io/*.c core/graph/*.c core/graph/passes/*.c core/dist/comm.c \
  2>/dev/null; ls core/cpu/*.c 2>/dev/null || true)
# a small make file so that only changed sources are recompiled, JOBS at a time
MK="$OUT/objs.mk"
{
  printf 'OBJS =\n'
  for s in $SRCS; do
    o="obj/$(echo "$s" | tr / _ | sed 's/\.c$/.o/')"
    printf 'OBJS += %s\n%s: %s/%s\n\t%s %s -MMD -c $< -o $@\n-include %s\n' \
      "$o" "$o" "$ROOT" "$s" "$CC" "$(echo $CFLAGS)" "${o%.o}.d"
  done
  printf 'obj/cdef.o: cdef.c\n\t%s %s -c $< -o $@\nOBJS += obj/cdef.o\n' "$CC" "$(echo $CFLAGS)"
  printf 'liboneflow_fuzz.a: $(OBJS)\n\trm -f $@ && ar rcs $@ $(OBJS)\n'
} > "$MK"
make -s -C "$OUT" -f objs.mk -j "$JOBS" liboneflow_fuzz.a
LIBS="-lopenblas -ljpeg -lpng -lz -lm -ldl -lpthread"
# fuzz_serve: flow-serve's request/JSON/config parsers (serve/), which it
# compiles itself
SERVE_SRCS="$ROOT/serve/json.c $ROOT/serve/protocol.c $ROOT/serve/config.c $ROOT/serve/log.c $ROOT/serve/trace.c"
for h in "$ROOT"/tools/fuzz/fuzz_*.c; do
  name=$(basename "$h" .c)
  extra=""
  [ "$name" = fuzz_serve ] && extra=$SERVE_SRCS
  stale=""
  # shellcheck disable=SC2086
  for s in "$h" "$OUT/liboneflow_fuzz.a" $extra; do [ "$s" -nt "$OUT/$name" ] && stale=1; done
  if [ ! -f "$OUT/$name" ] || [ -n "$stale" ]; then
    # shellcheck disable=SC2086
    "$CC" $CFLAGS -fsanitize=fuzzer "$h" $extra "$OUT/liboneflow_fuzz.a" $LIBS -o "$OUT/$name"
  fi
done
echo "fuzz harnesses in $OUT:" $(cd "$OUT" && for h in fuzz_*; do [ -x "$h" ] && printf '%s ' "$h"; done)
