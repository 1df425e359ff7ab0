# Thin wrapper over CMake and busted. `make example` and `make test` first
# install what is missing (Debian packages, as root or through sudo).
BUILD ?= build
JOBS ?= $(shell nproc)
LUA_ENV = LUA_PATH="$(CURDIR)/lua/?.lua;$(CURDIR)/lua/?/init.lua;;"
CMAKE_FLAGS ?=

.PHONY: all deps build example test test-lua test-c lint bench asan fuzz fuzz-replay install clean

all: build

deps:
	@sh tools/install_deps.sh

$(BUILD)/Makefile: CMakeLists.txt
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS)

build: $(BUILD)/Makefile
	cmake --build $(BUILD) -j $(JOBS)

example: deps build
	$(LUA_ENV) luajit examples/mnist/train.lua

test: deps build
	@sh tools/run_tests.sh $(BUILD)

test-lua: build
	$(LUA_ENV) luajit $$(command -v busted)

test-c: build
	cd $(BUILD) && ctest --output-on-failure

lint:
	luacheck $(wildcard lua spec bench examples)

bench: deps build
	$(LUA_ENV) luajit bench/ops.lua

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

install: build
	cmake --install $(BUILD)

clean:
	rm -rf $(BUILD) build-asan build-fuzz
