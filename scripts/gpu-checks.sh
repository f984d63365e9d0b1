#!/bin/bash
# [D]'s runs on a lent GPU machine, one experiment per call (../shared/device/README.md):
#   EXTRA_WHEELS="pytest==8.3.4 iniconfig pluggy safetensors==0.8.0" bash ../shared/device/prepare.sh
#   device run (carry .devwork): bash .devwork/build-and-run.sh bash scripts/gpu-checks.sh
# The GPU tests (C++ and Python), then the tokenize bench with its gpu placement and the rdma
# bench's GPU cases, every output under $OUT (or results/gpu-checks). A step that fails is
# reported and the next runs.
set -u
out=${OUT:-results/gpu-checks}
mkdir -p "$out"
step() {  # name, command...: its output to $out/<name>.log, its status to $out/status
  local name=$1; shift
  echo "== $name: $*"
  "$@" > "$out/$name.log" 2>&1
  local rc=$?
  echo "$name $rc" >> "$out/status"
  tail -5 "$out/$name.log"
}
nvidia-smi > "$out/nvidia-smi.txt" 2>&1
step cpp-build cmake -S . -B build/gpu -G Ninja $CMAKE_ARGS -DOUTBOARD_PYTHON=OFF -DOUTBOARD_MPI=OFF
step cpp-build2 cmake --build build/gpu --target outboard_unit_tests outboard-agent
step cpp-gpu build/gpu/outboard_unit_tests --gtest_filter='Gpu*:GpuWordPiece*:RegionTest.Gpu*:CudaDriver*'
step py-gpu python3 -m pytest -q tests/python/test_gpu.py tests/python/test_one_sided.py
step bench-tokenize outboard bench tokenize --quick --embed torch --models gpt2,bert-base-uncased \
  --out "$out/tokenize" --no-progress
step bench-rdma outboard bench rdma --quick --cases gpu,gpu_initiated,write_bw --out "$out/rdma" --no-progress
cat "$out/status"
