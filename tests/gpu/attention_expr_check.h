// The score-expression GPU tests' kernel programs (attention_expr_cuda_test.cpp,
// attention_expr_cache_test.cpp; layers/attention/jit/): the suite's fixture, which gives a run
// of the tests one kernel cache, and the prefetch of a test's programs on every core.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "engine/core/env.h"
#include "layers/attention/jit/kernel_cache.h"
#include "tests/gpu/attention_check.h"
#ifdef DRIFTLESS_HAVE_CUDA
#include "layers/attention/jit/jit_launch.h"
#endif

namespace driftless::attention_check {

namespace jit = layers::jit;

constexpr int64_t kHeads = 4, kKvHeads = 2;  // the expression tests' GQA 2:1

// The tables the expression tests read: ALiBi's slope per head, 2^-(h+1) (kHeads), and a
// per-head bias by distance (kHeads, 64), a smooth ramp of both signs.
inline std::vector<double> head_slopes() {
  std::vector<double> slopes;
  for (int64_t h = 0; h < kHeads; ++h) slopes.push_back(std::pow(2.0, -double(h + 1)));
  return slopes;
}
inline std::vector<double> distance_bias() {
  std::vector<double> bias;
  for (int64_t h = 0; h < kHeads; ++h)
    for (int64_t d = 0; d < 64; ++d) bias.push_back(0.5 * std::sin(0.3 * double(d + 7 * h)));
  return bias;
}

// The kernel cache of a run of these tests: ctest starts one process per test, so a program
// compiled by one test reaches the others, and later runs of this build, through one disk
// directory: $DRIFTLESS_KERNEL_CACHE where it is set, else the build's tests/kernel-cache (not
// the user's home). In memory it holds every program of the largest test (SkippedMaskTiles...:
// 54 on the wgmma kernels), so a test's prefetched programs stay loaded until it ends.
inline jit::KernelCacheOptions run_cache_options() {
  std::string dir = env_value("DRIFTLESS_KERNEL_CACHE");
  if (dir.empty()) dir = std::string(DL_BINARY_DIR) + "/tests/kernel-cache";
  return {256, dir};
}

// The suite's fixture: the run's cache, and after each test a line saying how its programs
// came (compiled, read from disk, already loaded), which is where a slow test's time goes.
class AttentionExprCuda : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { jit::configure_process_kernel_cache(run_cache_options()); }
  void SetUp() override {
    cache_ = &jit::process_kernel_cache();
    before_ = cache_->stats();
  }
  void TearDown() override {
    if (&jit::process_kernel_cache() != cache_) return;  // the test replaced the cache
    const jit::KernelCacheStats s = cache_->stats();
    if (s.misses == before_.misses && s.hits == before_.hits) return;
    std::printf("[kernel cache] %lld compiled, %lld read from disk, %lld fetches found loaded\n",
                (long long)(s.compiles - before_.compiles),
                (long long)(s.disk_hits - before_.disk_hits), (long long)(s.hits - before_.hits));
  }

 private:
  const jit::KernelCache* cache_ = nullptr;
  jit::KernelCacheStats before_;
};

// The programs of these cases' calls (the deterministic backward's, and with both_backwards
// the atomic dQ's too) fetched before the cases run, on every core (jit::prefetch): NVRTC
// compiles one program on one core, and a test asks for up to 54. The calls then fetch them
// loaded; the programs are the ones the calls would compile (PrefetchedCallsCompileNothing).
// Those of a learnable table under a mask, the longest to compile (BENCHMARKS.md, "GPU test
// suite: the score-expression tests' NVRTC compiles"), start first, then other learnable ones,
// so that no long compile starts last.
inline void prefetch(const std::vector<Case>& cases, bool both_backwards = true) {
#ifdef DRIFTLESS_HAVE_CUDA
  std::vector<ScoreModSpec> mods;  // the programs, alive until the fetches end
  std::vector<jit::ProgramUse> uses;
  for (const Case& c : cases) {
    mods.push_back(expression_mod(c));
    for (bool deterministic : {true, false}) {
      if (!deterministic && !both_backwards) continue;
      uses.push_back({mods.back().expression.get(), mods.back().mask.get(), int(c.head_dim),
                      !c.shift.zero(), deterministic});
    }
  }
  auto rank = [](const jit::ProgramUse& u) {
    const bool learnable = u.score != nullptr && u.score->param_count > 0;
    return (learnable && u.mask != nullptr ? 2 : 0) + (learnable ? 1 : 0);
  };
  std::stable_sort(
      uses.begin(), uses.end(),
      [&](const jit::ProgramUse& a, const jit::ProgramUse& b) { return rank(a) > rank(b); });
  jit::prefetch(uses, int(std::max(1u, std::thread::hardware_concurrency())));
#else
  (void)cases, (void)both_backwards;
#endif
}

// The learnable tables' accumulator adding one atomic pair a contribution, as before its
// register runs (param_grad.cuh; DRIFTLESS_GRAD_RUNS=0 compiles another program), while it
// lives. The runs regroup integer sums modulo 2^64 only, so the tables' gradient keeps its bits.
struct WithoutGradRuns {
  WithoutGradRuns() { ::setenv("DRIFTLESS_GRAD_RUNS", "0", 1); }
  ~WithoutGradRuns() { ::unsetenv("DRIFTLESS_GRAD_RUNS"); }
  WithoutGradRuns(const WithoutGradRuns&) = delete;
  WithoutGradRuns& operator=(const WithoutGradRuns&) = delete;
};

// p on CUDA with the learnable tables' accumulator without register runs (WithoutGradRuns).
inline Result run_without_grad_runs(const Problem& p) {
  WithoutGradRuns off;
  return run(p, DType::bf16, Device::cuda);
}

// The programs of these cases in both backwards, with the accumulator's register runs and
// without (run_without_grad_runs).
inline void prefetch_with_and_without_grad_runs(const std::vector<Case>& cases) {
  prefetch(cases);
  WithoutGradRuns off;
  prefetch(cases);
}

}  // namespace driftless::attention_check
