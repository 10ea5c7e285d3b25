// The kernel cache of the run-time compiled attention kernels on the GPU
// (layers/attention/jit/kernel_cache.h, jit_launch.h): an expression's kernels compile once per
// structure, pass and head dim, and jit::prefetch fetches exactly the programs the calls then
// use. The suite's other tests are in attention_expr_cuda_test.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "layers/attention/attention.h"
#include "layers/attention/jit/kernel_cache.h"
#include "tests/gpu/attention_check.h"
#include "tests/gpu/attention_expr_check.h"
#include "tests/gpu/gpu_test_util.h"

namespace driftless {
namespace {

using namespace attention_check;

// The kernels of an expression compile once per (structure, pass, head dim): a second run, or
// another constant, hits the cache; another expression compiles. Memory-only cache, fresh (the
// run's cache, and its disk, would serve what other tests compiled), then the run's again.
TEST_F(AttentionExprCuda, KernelCacheCompilesOncePerStructure) {
  DL_REQUIRE_GPU();
  const jit::KernelCacheOptions run_options = jit::process_kernel_cache().options();
  jit::configure_process_kernel_cache({64, ""});
  auto run_expr = [](const std::string& source) {
    Case c{"cache", {{65, 65}, {7, 7}}, kHeads, kKvHeads, 64};
    c.expression = source;
    const Problem p = make(c, 77);
    run(p, DType::bf16, Device::cuda);  // forward and backward: two programs
  };
  auto compiles = [] { return jit::process_kernel_cache().stats().compiles; };
  run_expr("score - 0.25 * abs(q - k) + 0.5");
  const int64_t first = compiles();
  EXPECT_EQ(first, 2) << "forward and backward programs";
  run_expr("score - 0.25 * abs(q - k) + 0.5");
  EXPECT_EQ(compiles(), first) << "the same expression compiled again";
  run_expr("score - 0.125 * abs(q - k) + 1.5");
  EXPECT_EQ(compiles(), first) << "another constant compiled again";
  run_expr("score - 0.25 * abs(q - k) * 0.5");
  EXPECT_EQ(compiles(), first + 2) << "another expression did not compile";
  EXPECT_GT(jit::process_kernel_cache().stats().hits, 0);
  jit::configure_process_kernel_cache(run_options);
}

// jit::prefetch fetches the programs the calls then fetch, no other: after it, calls of a mask
// alone (the identity score), of a shifted score, of a learnable table with and without the
// accumulator's register runs, in both backwards, find every program loaded (no miss of the
// cache). The tests' prefetch rests on it: a program it missed would be compiled, one at a
// time, at its first call. The programs are ones other tests use (their disk copies serve).
TEST_F(AttentionExprCuda, PrefetchedCallsCompileNothing) {
  DL_REQUIRE_GPU();
  uint64_t seed = testing::fresh_seed("attention expr prefetch");
  const std::vector<double> slopes = head_slopes(), width{3, 9, 17, 40}, bias = distance_bias();
  Case mask{"sinks", {{65, 65}, {7, 7, 2, 2}}, kHeads, kKvHeads, 64};
  mask.mask = "q - k < 24 || k < 4";
  mask.decls = {{"slope", {kHeads}, slopes, false}, {"width", {kHeads}, width, false}};
  Case shifted{"alibi_shift", {{65, 130}, {40, 40}}, kHeads, kKvHeads, 64};
  shifted.expression = "score - slope[h] * abs(q - k)";
  shifted.decls = {{"slope", {kHeads}, slopes, false}};
  shifted.shift = {37, 5};
  Case learn{"learn_bias_d128", {{65, 100, 5, 0}, {7, 7}}, kHeads, kKvHeads, 128};
  learn.expression = "score + bias[h, min(abs(q - k), 63)]";
  learn.decls = {{"bias", {kHeads, 64}, bias, true}};
  prefetch({mask, learn});
  prefetch({shifted}, false);  // shifted calls are made with the deterministic backward only
  {
    WithoutGradRuns off;
    prefetch({learn});
  }
  const int64_t misses = jit::process_kernel_cache().stats().misses;
  for (const Case& c : {mask, shifted, learn})
    for (bool deterministic : {true, false}) {
      if (!deterministic && c.name == "alibi_shift") continue;
      SCOPED_TRACE(c.name + (deterministic ? " deterministic" : " atomic dQ"));
      Problem p = make(c, seed += 10);
      p.spec.deterministic = deterministic;
      run(p, DType::bf16, Device::cuda);
      if (c.name == "learn_bias_d128") run_without_grad_runs(p);
      EXPECT_EQ(jit::process_kernel_cache().stats().misses, misses)
          << "a call fetched a program that prefetch did not";
    }
}

}  // namespace
}  // namespace driftless
