#!/usr/bin/env bash
# Builds driftless with CUDA and runs every GPU test (ctest label `gpu`), trains gpt2_tiny
# for 20 steps on the GPU (bf16), and runs the GPU-vs-CPU regression
# (configs/regress/gpu_vs_cpu.yaml: cuda f32 and bf16 against cpu f32), on a machine that
# has a GPU; there a GPU test that cannot open the device fails (DRIFTLESS_GPU_REQUIRED=1) instead of
# skipping. Logs go to ${OUT:-build-gpu}/gpu-tests.log, gpu-train.log, gpu-regress.log.
# The score-expression tests (AttentionExprCuda, and again on the mma.sync kernels) compile
# their kernels with NVRTC, each test's programs on every core at once, into one kernel cache
# that every test process of the run and later runs of the build share: the build's
# tests/kernel-cache, or $DRIFTLESS_KERNEL_CACHE where set (tests/gpu/attention_expr_check.h).
# Environment: BUILD (build dir), CMAKE_ARGS (extra configure flags, e.g.
# -DCMAKE_CUDA_ARCHITECTURES=90a to halve compile time), TARGETS (build only these targets,
# space-separated; default all), SANITIZE=1 (also compute-sanitizer memcheck and racecheck on
# the fast attention tests, DRIFTLESS_ATTN_FAST_QUICK's small and odd shapes; gpu-memcheck.log,
# gpu-racecheck.log; a reported error fails the run), QUICK=1 (the kernel loop, meant to take at
# most 3 minutes once built: builds driftless and test_gpu only, runs the fast attention's
# tests on their small and odd shapes, the schedules' and the atomic dQ's tests, the latter
# again with the sm_90a dK/dV kernel off (DRIFTLESS_ATTN_BWD_SM90=0: mma_sync/fast_dkv.cuh's),
# then `driftless bench attention`; no expression tests, no training, no regression).
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${BUILD:-build-gpu}
log_dir=${OUT:-$build}
mkdir -p "$log_dir"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$log_dir/gpu-info.txt"
# shellcheck disable=SC2086
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDRIFTLESS_CUDA=ON ${CMAKE_ARGS:-} \
  >"$log_dir/configure.log" 2>&1 || { tail -30 "$log_dir/configure.log"; exit 1; }
quick=${QUICK:-0}
[ "$quick" = 1 ] && TARGETS=${TARGETS:-driftless test_gpu}
targets=()
for t in ${TARGETS:-}; do targets+=(--target "$t"); done
cmake --build "$build" -j"$(nproc)" "${targets[@]}" >"$log_dir/build.log" 2>&1 ||
  { grep -E "error|Error" "$log_dir/build.log" | head -40; exit 1; }
tail -3 "$log_dir/build.log"
status=0
# nvidia-smi saw a GPU above: a test that cannot open one fails instead of skipping
# (gpu_test_util.h DL_REQUIRE_GPU, test_parallel_mpi --device cuda).
export DRIFTLESS_GPU_REQUIRED=1
if [ "$quick" = 1 ]; then
  status=0
  DRIFTLESS_ATTN_FAST_QUICK=1 "$build/tests/test_gpu" \
    --gtest_filter='AttentionFast*:AttentionSchedule*' 2>&1 | tee "$log_dir/gpu-tests.log" |
    grep -E "^\[  (PASSED|FAILED|SKIPPED) " || status=1
  grep -q "^\[  FAILED" "$log_dir/gpu-tests.log" && status=1
  # The atomic dQ with the sm_90a dK/dV kernel off: mma_sync/fast_dkv.cuh's kernel
  # (sm90/bwd_sm90.h).
  DRIFTLESS_ATTN_BWD_SM90=0 DRIFTLESS_ATTN_FAST_QUICK=1 "$build/tests/test_gpu" \
    --gtest_filter='AttentionFast.AtomicDq*' 2>&1 | tee "$log_dir/gpu-tests-bwd-sm90-off.log" |
    grep -E "^\[  (PASSED|FAILED|SKIPPED) " || status=1
  grep -q "^\[  FAILED" "$log_dir/gpu-tests-bwd-sm90-off.log" && status=1
  "$build/apps/driftless" bench attention 2>&1 | tee "$log_dir/bench-attention.log" | tail -8 ||
    status=1
  exit "$status"
fi
ctest --test-dir "$build" -L gpu --output-on-failure 2>&1 | tee "$log_dir/gpu-tests.log" || status=1
if [ "${SANITIZE:-0}" = 1 ]; then
  for tool in memcheck:1 racecheck:2; do  # DRIFTLESS_ATTN_FAST_QUICK: 1 up to 300 rows, 2 odd shapes
    DRIFTLESS_ATTN_FAST_QUICK=${tool#*:} compute-sanitizer --tool "${tool%:*}" --error-exitcode 1 \
      "$build/tests/test_gpu" --gtest_filter='AttentionFast*' >"$log_dir/gpu-${tool%:*}.log" 2>&1 ||
      status=1
    tail -2 "$log_dir/gpu-${tool%:*}.log"
  done
fi
if [ -x "$build/apps/driftless" ]; then
  dl="$build/apps/driftless"
  "$dl" info | tee -a "$log_dir/gpu-tests.log"
  "$dl" train --config configs/runs/gpu_smoke.yaml --quiet \
    --set run.output_dir="$build/runs/gpu_smoke" 2>&1 | tee "$log_dir/gpu-train.log" || status=1
  "$dl" regress --config configs/regress/gpu_vs_cpu.yaml --output "$build/runs/gpu_vs_cpu" \
    2>&1 | tee "$log_dir/gpu-regress.log" || status=1
fi
exit "$status"
