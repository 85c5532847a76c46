# Thin wrapper over CMake for the README's two commands and CI. Everything real lives in CMakeLists.txt.

# `cmake --build` runs make again below this make. A sub-make prints "make[N]: Entering/Leaving directory" for
# every recursion level (GNU make turns -w on when MAKELEVEL > 0), about a hundred lines per build; the flag
# travels to every sub-make through MAKEFLAGS and silences them.
MAKEFLAGS += --no-print-directory
BUILD ?= build
SAN_BUILD ?= build-asan
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
CMAKE_FLAGS ?=
# The project's own virtual environment: scripts/python-deps.sh creates it with the python3 on PATH and every
# pip install of set-up goes into it, never into the system interpreter. The Python tests and the demo run with
# its python, and CMake builds the extension attn._ext for it. VENV=... picks another directory.
VENV ?= .venv
PYTHON3 := $(abspath $(VENV))/bin/python
export ATTN_VENV := $(abspath $(VENV))

.PHONY: all deps build run run-synthetic run-vllm run-vllm-cp test test-c test-python test-sanitize test-vllm test-mpi \
  install clean

all: build

deps:
	@bash scripts/setup.sh

CONFIGURE = cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release -DPython3_EXECUTABLE=$(PYTHON3) \
	  $(CMAKE_FLAGS)

build: deps
	@$(CONFIGURE) >/dev/null
	@cmake --build $(BUILD) -j $(JOBS)

# The main job's set-up and build, quiet: output goes to $(BUILD)/setup.log and $(BUILD)/build.log, a progress
# bar shows on a terminal, the log tail on failure (V=1 shows everything).
.PHONY: build-quiet
build-quiet:
	@bash scripts/quiet.sh "set-up (scripts/setup.sh)" $(BUILD)/setup.log bash scripts/setup.sh
	@bash scripts/quiet.sh "build ($(BUILD))" $(BUILD)/build.log sh -c '$(CONFIGURE) && cmake --build $(BUILD) -j $(JOBS)'

# The main job: the real-model demo (MiniLM embeddings + SmolLM2 greedy generation through the paged KV
# cache, every attention call in attn). Without the model packages the demo says so and runs the built-in
# synthetic workload instead; `make run-synthetic` runs that workload directly.
DEMO_ARGS ?=
run: build-quiet
	@ATTN_LIBRARY=$(CURDIR)/$(BUILD)/libattn.so PYTHONPATH=$(CURDIR)/python \
	  $(PYTHON3) -m attn_demo $(DEMO_ARGS)

run-synthetic: build
	@./$(BUILD)/cli/attn run

test-c: build
	@cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

test-python: build
	@if [ -d tests/python ] && ls tests/python/test_*.py >/dev/null 2>&1; then \
	  ATTN_LIBRARY=$(CURDIR)/$(BUILD)/libattn.so PYTHONPATH=$(CURDIR)/python $(PYTHON3) -m pytest -q -rs tests/python; \
	fi

# Every test: C suites (ctest) and the Python suite (pytest; attn._ext is found next to libattn.so).
test: test-c test-python

# The C suites again under AddressSanitizer + UndefinedBehaviorSanitizer (debug build), then the extension's
# random-argument driver and the binding tests through the sanitized attn._ext (python with the ASan runtime
# preloaded; Python's own allocations through malloc so that ASan sees them; an allocation too large returns
# NULL, as the tests of huge shapes expect a MemoryError; leaks not checked: the interpreter keeps its objects).
test-sanitize: deps
	@cmake -S . -B $(SAN_BUILD) -DCMAKE_BUILD_TYPE=Debug -DATTN_SANITIZE="address;undefined;float-cast-overflow" -DPython3_EXECUTABLE=$(PYTHON3) $(CMAKE_FLAGS) >/dev/null
	@cmake --build $(SAN_BUILD) -j $(JOBS)
	@cd $(SAN_BUILD) && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 ctest --output-on-failure -j $(JOBS) -LE slow
	@LD_PRELOAD=$$($${CC:-cc} -print-file-name=libasan.so) ASAN_OPTIONS=detect_leaks=0:allocator_may_return_null=1 UBSAN_OPTIONS=print_stacktrace=1 \
	  PYTHONMALLOC=malloc ATTN_LIBRARY=$(CURDIR)/$(SAN_BUILD)/libattn.so PYTHONPATH=$(CURDIR)/python \
	  $(PYTHON3) -m pytest -q -rs -p no:cacheprovider tests/python/test_ext_robust.py tests/python/test_bindings.py

# The C suites under ThreadSanitizer: clang -fsanitize=thread with LLVM's libomp, run with Archer
# (OMP_TOOL_LIBRARIES: OpenMP's barriers and reductions made visible to TSan) on the small shapes of the
# sanitizer tier (ATTN_TEST_SMALL), -LE slow. Any report fails its test (halt_on_error, exitcode 66).
# scripts/tsan_env.sh installs clang-14, libclang-rt-14-dev and libomp-14-dev when missing.
.PHONY: test-tsan fuzz
TSAN_BUILD ?= build-tsan
TSAN_OPT ?= -O1
test-tsan:
	@ARCHER=$$(bash scripts/tsan_env.sh | tail -1) && \
	  cmake -S . -B $(TSAN_BUILD) -DCMAKE_C_COMPILER=clang -DCMAKE_BUILD_TYPE=Debug -DCMAKE_C_FLAGS_DEBUG="$(TSAN_OPT) -g" \
	    -DATTN_SANITIZE=thread -DATTN_PYTHON_EXT=OFF $(CMAKE_FLAGS) >/dev/null && \
	  cmake --build $(TSAN_BUILD) -j $(JOBS) && \
	  cd $(TSAN_BUILD) && OMP_TOOL_LIBRARIES=$$ARCHER \
	    TSAN_OPTIONS="halt_on_error=1 exitcode=66 second_deadlock_stack=1 ignore_noninstrumented_modules=1" \
	    ctest --output-on-failure -j $(JOBS) -LE slow

# The fuzz campaign (scripts/fuzz_campaign.sh: every libFuzzer target, FUZZ_RUNS executions each or
# FUZZ_SECONDS seconds, figures into docs/ROBUSTNESS.md).
FUZZ_RUNS ?= 10000000
FUZZ_SECONDS ?= 0
fuzz:
	@bash scripts/fuzz_campaign.sh $(FUZZ_RUNS) $(FUZZ_SECONDS)

# attn inside real vLLM. scripts/vllm_env.sh installs vLLM CPU into its own venv on demand (once:
# ~10 min, ~3 GB; bench/peers/setup_env.sh) and prints its python. run-vllm serves SmolLM2-135M through
# vllm.LLM with attn, then with vLLM's own CPU backend: both texts, token identity, tokens/s at batch 1 and 8
# (VLLM_ARGS, e.g. "--dtype bfloat16 --embed"). test-vllm: tests/vllm (CI runs it after the plain suite), then
# the torch tensor tests (tests/python/test_torch.py, skipped by the plain suite's torch-less venv) and
# attn.distributed on torch.distributed (gloo, 2 and 3 ranks: tests/python/test_distributed_torch.py) with this
# venv's torch.
VLLM_ARGS ?= --embed
run-vllm: build
	@PY=$$(bash scripts/vllm_env.sh) && ATTN_LIBRARY=$(CURDIR)/$(BUILD)/libattn.so PYTHONPATH=$(CURDIR)/python \
	  $$PY -m attn_demo.vllm_run $(VLLM_ARGS)

# run-vllm-cp: vLLM's decode context parallel with attn (docs/CONTEXT_PARALLEL.md): a small random-weight Llama
# (attn_demo.tiny_llama) at TP 1, TP 2 and TP 2 + DCP 2 (interleave 1 and 16): token identity, tokens/s, and
# vLLM's refusals (VLLM_CP_ARGS, default --refusals).
VLLM_CP_ARGS ?= --refusals
run-vllm-cp: build
	@PY=$$(bash scripts/vllm_env.sh) && ATTN_LIBRARY=$(CURDIR)/$(BUILD)/libattn.so PYTHONPATH=$(CURDIR)/python \
	  $$PY -m attn_demo.vllm_run --cp $(VLLM_CP_ARGS)

test-vllm: build
	@PY=$$(bash scripts/vllm_env.sh) && ATTN_LIBRARY=$(CURDIR)/$(BUILD)/libattn.so PYTHONPATH=$(CURDIR)/python \
	  $$PY -m pytest -q -rs -s -p no:cacheprovider tests/vllm && \
	  ATTN_LIBRARY=$(CURDIR)/$(BUILD)/libattn.so PYTHONPATH=$(CURDIR)/python OMP_NUM_THREADS=1 \
	  $$PY -m pytest -q -rs -p no:cacheprovider tests/python/test_torch.py tests/python/test_distributed_torch.py

# attn inside Hugging Face transformers and diffusers: scripts/integrations_env.sh adds diffusers to
# the vLLM venv above (torch pinned; a no-op once done); tests/integrations compares SmolLM2 / MiniLM with
# attn_implementation="attn" vs "sdpa" and small random Flux / SD3 / Wan / QwenImage transformers with the
# "attn" backend vs diffusers' native one (docs/DIFFUSION.md, README).
.PHONY: test-integrations
test-integrations: build
	@PY=$$(bash scripts/integrations_env.sh | tail -n 1) && ATTN_LIBRARY=$(CURDIR)/$(BUILD)/libattn.so \
	  PYTHONPATH=$(CURDIR)/python $$PY -m pytest -q -rs -p no:cacheprovider tests/integrations

# Context parallelism over MPI (docs/CONTEXT_PARALLEL.md): scripts/mpi_env.sh installs Open MPI and mpi4py on
# demand (a no-op when present); libattn_mpi and tests/mpi are built in $(MPI_BUILD) and run under mpirun
# -np 2, 3 and 4 (oversubscribed, OMP_NUM_THREADS=1 per rank, each run under `timeout`; ctest label mpi).
MPI_BUILD ?= build-mpi
test-mpi: deps
	@PYTHON=$(PYTHON3) bash scripts/mpi_env.sh
	@cmake -S . -B $(MPI_BUILD) -DCMAKE_BUILD_TYPE=Release -DATTN_MPI=ON -DATTN_MPI_TESTS=ON -DATTN_MPI_CLI=ON \
	  -DPython3_EXECUTABLE=$(PYTHON3) $(CMAKE_FLAGS) >/dev/null
	@cmake --build $(MPI_BUILD) -j $(JOBS) --target attn_mpi_check
	@cd $(MPI_BUILD) && OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 ctest --output-on-failure -L mpi

# aarch64: cross-build with Debian's aarch64 compiler and the C suites under qemu-user, with
# QEMU_CPU=cortex-a57 and QEMU_CPU=max (scripts/test_arm64.sh; installs through scripts/arm64_env.sh).
.PHONY: test-arm64
ARM64_BUILD ?= build-arm64
test-arm64:
	@ARM64_BUILD=$(ARM64_BUILD) JOBS=$(JOBS) bash scripts/test_arm64.sh

# Executed instructions per kernel tile, neon vs avx2, counted by a qemu TCG plugin (an instruction count, not a
# time; scripts/arm64_insn_count.sh). Needs the arm64 build of test-arm64 and the x86 build.
.PHONY: insns-arm64
insns-arm64:
	@ARM64_BUILD=$(ARM64_BUILD) X86_BUILD=$(BUILD) bash scripts/arm64_insn_count.sh

install: build
	@cmake --install $(BUILD)

clean:
	@rm -rf $(BUILD) $(SAN_BUILD)
