# The two commands: `make run` and `make test`. Everything else is a helper.
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
BUILD := build/py
ASAN_BUILD := build/asan
TSAN_BUILD := build/tsan
export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)
# UCX's malloc hooks confuse the sanitizers; its transports work without them.
SANITIZER_ENV := UCX_MEM_MALLOC_HOOKS=no UCX_MEM_MMAP_HOOK_MODE=none \
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  LSAN_OPTIONS=suppressions=$(CURDIR)/tests/sanitizers/lsan.supp TSAN_OPTIONS=halt_on_error=1

.PHONY: run test bootstrap build test-cpp test-asan test-tsan test-python clean

run: build
	$(VENV)/bin/outboard run

test: build test-cpp test-asan test-tsan test-python

bootstrap:
	@scripts/bootstrap.sh

# scikit-build-core builds everything (library, agent, extension, C++ tests)
# in $(BUILD) and installs the package editable into the .venv.
build: bootstrap
	$(PY) -m pip install -q --no-build-isolation -e .

test-cpp: build
	ctest --test-dir $(BUILD) --output-on-failure -j2 --timeout 180

# The C++ tests again under ASan+UBSan (with leak checks), and under TSan:
# the channel is used from several threads.
test-asan: bootstrap
	cmake -S . -B $(ASAN_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Debug -DOUTBOARD_PYTHON=OFF \
	  -DOUTBOARD_SANITIZE=address,undefined > /dev/null
	cmake --build $(ASAN_BUILD)
	$(SANITIZER_ENV) ctest --test-dir $(ASAN_BUILD) --output-on-failure -j2 --timeout 300

test-tsan: bootstrap
	cmake -S . -B $(TSAN_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Debug -DOUTBOARD_PYTHON=OFF \
	  -DOUTBOARD_SANITIZE=thread > /dev/null
	cmake --build $(TSAN_BUILD)
	$(SANITIZER_ENV) ctest --test-dir $(TSAN_BUILD) --output-on-failure -j2 --timeout 300

test-python: build
	$(PY) -m pytest -q

clean:
	rm -rf build
