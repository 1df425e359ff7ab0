# Thin wrapper over CMake and busted. `make example` and `make test` first
# install what is missing (Debian packages, as root or through sudo).
BUILD ?= build
JOBS ?= $(shell nproc)
LUA_ENV = LUA_PATH="$(CURDIR)/lua/?.lua;$(CURDIR)/lua/?/init.lua;;"
CMAKE_FLAGS ?=

.PHONY: all deps build example test test-lua test-c lint bench asan install clean doc

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

# The API reference (LDoc, config.ld) from the doc comments, in build/doc.
doc:
	@sh tools/make_doc.sh $(BUILD)/doc

lint:
	luacheck $(wildcard lua spec bench examples)

bench: deps build
	$(LUA_ENV) luajit bench/ops.lua

# AddressSanitizer + UBSan over the C tests and the busted specs.
asan: deps
	cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DOF_SANITIZE=ON $(CMAKE_FLAGS)
	cmake --build build-asan -j $(JOBS)
	@OF_BUILD_DIR=build-asan sh tools/run_asan.sh

install: build
	cmake --install $(BUILD)

clean:
	rm -rf $(BUILD) build-asan
