# Thin wrapper over CMake and busted. `make example` and `make test` first
# install what is missing (Debian packages, as root or through sudo).
BUILD ?= build
JOBS ?= $(shell nproc)
LUA_ENV = LUA_PATH="$(CURDIR)/lua/?.lua;$(CURDIR)/lua/?/init.lua;;"
CMAKE_FLAGS ?=

.PHONY: all deps build example test test-lua test-c lint bench asan soak tsan fuzz fuzz-replay onnx-conformance install clean doc \
	device-kit device-kit-proof

all: build

deps:
	@sh tools/install_deps.sh

$(BUILD)/Makefile: CMakeLists.txt
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS)

build: $(BUILD)/Makefile
	cmake --build $(BUILD) -j $(JOBS)

example: deps build
	./bin/flow examples/mnist/train.lua

test: deps build
	@sh tools/run_tests.sh $(BUILD)

test-lua: build
	$(LUA_ENV) luajit $$(command -v busted)

test-c: build
	cd $(BUILD) && ctest --output-on-failure

# The API reference (LDoc, config.ld) from the doc comments, in build/doc.
doc:
	@sh tools/make_doc.sh $(BUILD)/doc

lint:
	luacheck $(wildcard lua spec bench examples)

# Results go to $(BUILD)/benchmarks.md; `make bench WRITE=1` updates the
# tracked doc/benchmarks.md instead.
bench: deps build
	$(LUA_ENV) luajit bench/ops.lua $(if $(WRITE),,--out $(BUILD)/benchmarks.md)

# Long runs (doc/reliability.md): 20,000 steps of the RSS soak spec, the
# compiled graph from 8 threads x 1000 calls, natively and under Helgrind.
soak: build
	$(LUA_ENV) luajit spec/c/graph_threads_save.lua $(BUILD)/graph_threads.ofg
	OF_THREADS_GRAPH=$(BUILD)/graph_threads.ofg $(BUILD)/test_graph_threads 8 1000
	OF_THREADS_GRAPH=$(BUILD)/graph_threads.ofg sh tools/helgrind_threads.sh $(BUILD)/test_graph_threads 8 1000
	OF_SOAK_STEPS=20000 $(LUA_ENV) luajit $$(command -v busted) spec/soak

# ThreadSanitizer (clang): the compiled graph from 8 threads x 1000 calls,
# plus each thread's own graphs, eager steps and errors (tools/tsan_threads.sh;
# .ci/run runs a short 8 x 50). TSAN_THREADS / TSAN_CALLS change the length.
TSAN_THREADS ?= 8
TSAN_CALLS ?= 1000
tsan: build
	sh tools/tsan_threads.sh $(TSAN_THREADS) $(TSAN_CALLS)

# AddressSanitizer + UBSan over the C tests and the busted specs.
asan: deps
	cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DOF_SANITIZE=ON $(CMAKE_FLAGS)
	cmake --build build-asan -j $(JOBS)
	@OF_BUILD_DIR=build-asan sh tools/run_asan.sh

# libFuzzer (clang) and LuaJIT-driven fuzzing of every loader, FUZZ_TIME
# seconds per harness (tools/fuzz/run.sh; doc/reliability.md).
FUZZ_TIME ?= 600
fuzz:
	FUZZ_TIME=$(FUZZ_TIME) sh tools/fuzz/run.sh

# the committed corpora and past crashes through the normal loaders (also
# part of make test, spec/io/fuzz_regress_spec.lua)
fuzz-replay: build
	sh tools/fuzz/replay.sh

# The GPU kit (doc/gpu.md): one relocatable folder, device-kit/, with
# everything a bare CUDA machine lacks; device-kit-proof runs its check with
# this machine's luajit, busted, Lua modules and OpenBLAS hidden (unshare -m).
device-kit:
	JOBS=$(JOBS) sh tools/device_kit.sh device-kit

device-kit-proof:
	sh tools/device_kit_proof.sh device-kit $(BUILD)/device-check

# ONNX's node conformance cases (onnx 1.17 wheel from PyPI, cached) through
# flow.onnx.load, and doc/onnx.md's table rewritten (tools/onnx_conformance.sh)
onnx-conformance: build
	sh tools/onnx_conformance.sh --doc

# make install [PREFIX=/usr/local] [DESTDIR=/staging]: the library, the header,
# the Lua modules (PREFIX/share/lua/5.1) and bin/flow (PREFIX/bin).
install: build
	DESTDIR="$(DESTDIR)" cmake --install $(BUILD) $(if $(PREFIX),--prefix "$(PREFIX)")

clean:
	rm -rf $(BUILD) build-asan build-fuzz
