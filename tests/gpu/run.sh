#!/usr/bin/env bash
# Builds driftless with CUDA and runs every GPU test (ctest label `gpu`) plus a smoke run,
# on a machine that has a GPU. Logs go to ${OUT:-build-gpu}/gpu-tests.log.
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${BUILD:-build-gpu}
log_dir=${OUT:-$build}
mkdir -p "$log_dir"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$log_dir/gpu-info.txt"
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDRIFTLESS_CUDA=ON >/dev/null
cmake --build "$build" -j"$(nproc)" 2>&1 | tail -5
ctest --test-dir "$build" -L gpu --output-on-failure 2>&1 | tee "$log_dir/gpu-tests.log"
"$build/apps/driftless" info | tee -a "$log_dir/gpu-tests.log"
