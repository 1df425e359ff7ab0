#!/bin/sh
# tools/device_kit.sh [KIT_DIR] -- builds OneFlow-Lua with CUDA (sm_80 and
# sm_90) in its own tree (build-kit) and packs into one relocatable folder
# (default: device-kit/, git-ignored) everything a bare CUDA machine lacks:
# LuaJIT, busted and the Lua modules it loads, OpenBLAS and the other shared
# libraries liboneflow needs that a CUDA image does not have, our libraries,
# and this checkout's Lua code, specs, benches and docs. Copy the folder to
# the GPU machine and run `sh KIT/check.sh [OUT]` (doc/gpu.md).
#
# The folder must stay <= 60 MiB (the GPU machine is reached by a copy of
# limited size), so the kit build leaves out oneDNN (40 MiB; CPU
# convolutions fall back to im2col + OpenBLAS there), keeps only the sm_80
# and sm_90 machine code (no PTX) and compresses the fat binary.
#
# Environment: JOBS (parallel build jobs, default 2), KIT_BUILD (the build
# tree, default build-kit), CUDA_ARCHS (default "80-real;90-real"),
# KIT_NO_BUILD=1 (pack what the build tree holds, without building).
set -eu
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
KIT=${1:-device-kit}
case $KIT in /*) ;; *) KIT="$ROOT/$KIT" ;; esac
BUILD=${KIT_BUILD:-build-kit}
JOBS=${JOBS:-2}
ARCHS=${CUDA_ARCHS:-80-real;90-real}
LIMIT_MIB=60

if [ "${KIT_NO_BUILD:-0}" = 1 ]; then   # repack what $BUILD holds
  [ -f "$BUILD/liboneflow_cuda.so" ] || { echo "device_kit: nothing built in $BUILD"; exit 1; }
else
echo "== configure $BUILD (CUDA on: $ARCHS; oneDNN off)"
# RUNPATH $ORIGIN: our libraries find the packed ones next to them, wherever
# the folder is put (liboneflow_cuda adds the usual CUDA folders, CMakeLists).
mkdir -p "$BUILD"
cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DOF_CUDA=ON -DOF_WITH_DNNL=OFF \
  "-DCMAKE_CUDA_ARCHITECTURES=$ARCHS" "-DCMAKE_CUDA_FLAGS=-Xfatbin=-compress-all" \
  '-DCMAKE_BUILD_RPATH=$ORIGIN' > "$BUILD/configure.log" 2>&1 ||
  { cat "$BUILD/configure.log"; exit 1; }
grep -q 'OneFlow-Lua CUDA part: ON' "$BUILD/configure.log" ||
  { echo "device_kit: the CUDA part is not configured (see $BUILD/configure.log)"; exit 1; }
echo "== build (-j$JOBS)"
cmake --build "$BUILD" -j"$JOBS" --target oneflow oneflow_cuda
fi

echo "== pack into $KIT"
rm -rf "$KIT"
mkdir -p "$KIT/bin" "$KIT/lib" "$KIT/lua/share" "$KIT/lua/lib" "$KIT/src"

# the source tree as tracked (plus uncommitted edits): Lua code, specs,
# benches, docs and the C/CUDA sources some specs read (coverage tables)
git ls-files -z --cached --others --exclude-standard |
  tar --null -T - -cf - 2>/dev/null | tar -xf - -C "$KIT/src"
rm -rf "$KIT/src/tools/fuzz/corpus" "$KIT/src/tools/fuzz/crashes"
git rev-parse HEAD > "$KIT/COMMIT" 2>/dev/null || echo unknown > "$KIT/COMMIT"
git status --porcelain | grep -q . && echo "(with uncommitted changes)" >> "$KIT/COMMIT"

cp "$BUILD/liboneflow.so" "$BUILD/liboneflow_cuda.so" "$KIT/lib/"
strip --strip-unneeded "$KIT/lib/liboneflow.so" "$KIT/lib/liboneflow_cuda.so"

# LuaJIT: Debian's binary links LuaJIT statically (only libc/libm/libgcc_s)
cp -L "$(command -v luajit)" "$KIT/bin/luajit"
# busted and its modules (Debian's lua-busted, penlight, lua-term,
# lua-cliargs, say, luassert, mediator, dkjson, lua-system, lfs, yaml)
for d in /usr/share/lua/5.1 /usr/local/share/lua/5.1; do
  [ -d "$d" ] && cp -rL "$d/." "$KIT/lua/share/"
done
rm -rf "$KIT/lua/share/ldoc" "$KIT/lua/share/luacheck"
for d in /usr/lib/x86_64-linux-gnu/lua/5.1 /usr/local/lib/lua/5.1; do
  [ -d "$d" ] && cp -rL "$d/." "$KIT/lua/lib/"
done
[ -f "$KIT/lua/share/busted/runner.lua" ] ||
  { echo "device_kit: busted's modules not found (Debian: lua-busted)"; exit 1; }
cat > "$KIT/bin/busted" <<'EOF'
-- busted's runner, as Debian's /usr/bin/busted (run it with the kit's luajit)
require 'busted.runner'({ standalone = false })
EOF

# Shared libraries our libraries and the Lua C modules need, except those
# any Linux (glibc, libstdc++, libgcc) or CUDA machine (the driver, the CUDA
# toolkit's cuBLAS, cuDNN, NCCL) has.
system_lib() {
  case $1 in
    linux-vdso*|ld-linux*|libc.so*|libm.so*|libdl.so*|librt.so*|libpthread.so*) return 0 ;;
    libstdc++*|libgcc_s*|libcuda.so*|libcublas*|libcudnn*|libnccl*|libcudart*) return 0 ;;
  esac
  return 1
}
todo=$(find "$KIT/lib" "$KIT/lua/lib" -name '*.so*' -type f)
seen=" "
while [ -n "$todo" ]; do
  next=""
  for f in $todo; do
    deps=$(ldd "$f" 2>/dev/null | awk '$2 == "=>" && $3 ~ /^\// {print $1 " " $3}')
    # shellcheck disable=SC2086
    set -- $deps
    while [ $# -ge 2 ]; do
      name=$1 path=$2
      shift 2
      system_lib "$name" && continue
      case $seen in *" $name "*) continue ;; esac
      seen="$seen$name "
      [ -f "$KIT/lib/$name" ] && continue
      cp -L "$path" "$KIT/lib/$name"
      next="$next $KIT/lib/$name"
    done
  done
  todo=$next
done

# The launcher environment: everything relative to the folder.
cat > "$KIT/env.sh" <<'EOF'
# . KIT/env.sh -- the kit's environment: its luajit, Lua modules, libraries
# and the CUDA libraries of the system or, where the system has none, of
# the PyTorch installation (python3's site-packages/nvidia/*/lib).
KIT=${KIT:-$(cd "$(dirname "$0")" && pwd)}
export KIT
export PATH="$KIT/bin:$PATH"
export OF_LIBRARY="$KIT/lib/liboneflow.so"
export LUA_PATH="$KIT/src/lua/?.lua;$KIT/src/lua/?/init.lua;$KIT/src/?.lua;$KIT/lua/share/?.lua;$KIT/lua/share/?/init.lua"
export LUA_CPATH="$KIT/lua/lib/?.so"
export LD_LIBRARY_PATH="$KIT/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
of_kit_has_lib() {   # soname: found by the dynamic loader without help?
  for p in $(ldconfig -p 2>/dev/null | awk -v so="$1" '$1 == so { print $NF }'); do
    [ -e "$p" ] && return 0   # (the cache may name a file that is gone)
  done
  for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib \
           $(echo "${LD_LIBRARY_PATH:-}" | tr ':' ' '); do
    [ -e "$d/$1" ] && return 0
  done
  return 1
}
OF_KIT_TORCH_LIBS=""
for so in libcublas.so.13 libcublasLt.so.13 libcudnn.so.9 libnccl.so.2 libcudart.so.13; do
  of_kit_has_lib "$so" && continue
  [ -n "${OF_KIT_NVIDIA_DIRS+x}" ] || OF_KIT_NVIDIA_DIRS=$(${PYTHON:-python3} -c '
import glob, os
try:
    import nvidia
    for p in nvidia.__path__:
        for d in sorted(glob.glob(os.path.join(p, "*", "lib"))): print(d)
except Exception:
    pass' 2>/dev/null)
  for d in $OF_KIT_NVIDIA_DIRS; do
    if [ -e "$d/$so" ]; then
      export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$d"
      OF_KIT_TORCH_LIBS="$OF_KIT_TORCH_LIBS $so=$d"
      break
    fi
  done
done
export OF_KIT_TORCH_LIBS
EOF
cat > "$KIT/run" <<'EOF'
#!/bin/sh
# KIT/run CMD ARGS -- runs CMD with the kit's environment in KIT/src
# (e.g. `KIT/run luajit bin/busted spec/cuda/ops_spec.lua`)
KIT=$(cd "$(dirname "$0")" && pwd)
. "$KIT/env.sh"
cd "$KIT/src" || exit 1
exec "$@"
EOF
cat > "$KIT/check.sh" <<'EOF'
#!/bin/sh
# KIT/check.sh [OUT] -- the GPU check (src/tools/device_check.sh) from the kit
KIT=$(cd "$(dirname "$0")" && pwd)
exec sh "$KIT/src/tools/device_check.sh" "$@"
EOF
chmod +x "$KIT/run" "$KIT/check.sh"
cp "$KIT/bin/busted" "$KIT/bin/busted.lua"

# What the packed binaries need from the host: the newest glibc symbol
# version (a machine with an older glibc cannot run the kit).
glibc=$(for f in "$KIT/bin/luajit" "$KIT"/lib/*.so* "$KIT"/lua/lib/*.so "$KIT"/lua/lib/*/*.so; do
          objdump -T "$f" 2>/dev/null | grep -o 'GLIBC_[0-9.]*'
        done | sort -t. -k2,2n -k3,3n -u | tail -1)
{
  echo "commit: $(cat "$KIT/COMMIT" | tr '\n' ' ')"
  echo "built: $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -m), nvcc $(nvcc --version 2>/dev/null | sed -n 's/.*release \([0-9.]*\).*/\1/p')"
  echo "cuda archs: $ARCHS; needs glibc >= ${glibc#GLIBC_}"
  echo "libraries:"
  for f in "$KIT"/lib/*; do echo "  $(basename "$f") $(du -k "$f" | cut -f1) KiB"; done
} > "$KIT/MANIFEST"
size=$(du -sm "$KIT" | cut -f1)
echo "size: ${size} MiB" >> "$KIT/MANIFEST"
cat "$KIT/MANIFEST"
if [ "$size" -gt "$LIMIT_MIB" ]; then
  echo "device_kit: $KIT is ${size} MiB, over the ${LIMIT_MIB} MiB limit"
  exit 1
fi
echo "device_kit: $KIT ready (${size} MiB); run: sh $KIT/check.sh [OUT]"
