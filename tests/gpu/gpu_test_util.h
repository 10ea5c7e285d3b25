// Shared pieces of the GPU tests (CONTRIBUTING.md tier 2): the skip without a device, fresh
// random seeds per run (printed, so a failure can be replayed), and NaN-poisoned allocator
// blocks so an output element a kernel forgets to write shows up.
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "engine/core/device_ops.h"
#include "engine/core/env.h"
#include "engine/core/tensor.h"

// Skips a test where no CUDA device can be opened. With DRIFTLESS_GPU_REQUIRED=1 (tests/gpu/run.sh,
// on a machine that has a GPU) that fails instead: a CUDA driver older than the runtime, or
// a hidden device, would otherwise turn every GPU test into a skip and the run into a pass.
#define DL_REQUIRE_GPU()                                                                        \
  if (::driftless::cuda::device_count() == 0) {                                                 \
    if (::driftless::testing::gpu_required())                                                   \
      GTEST_FAIL() << "DRIFTLESS_GPU_REQUIRED=1 but no CUDA device can be opened (is the CUDA " \
                      "driver older than the runtime this was built with?)";                    \
    GTEST_SKIP() << "no CUDA device present";                                                   \
  }

namespace driftless::testing {

// DRIFTLESS_GPU_REQUIRED=1: a missing GPU is a failure, not a skip (DL_REQUIRE_GPU).
inline bool gpu_required() {
  return env_value("DRIFTLESS_GPU_REQUIRED") == "1";
}

// A new seed per call: a random base per process (printed once with `tag`) plus a counter.
inline uint64_t fresh_seed(const char* tag) {
  static const uint64_t base = [tag] {
    // DRIFTLESS_TEST_SEED=<printed seed> replays a failing run's inputs.
    const std::string env = env_value("DRIFTLESS_TEST_SEED");
    const bool fixed = !env.empty();
    uint64_t s = fixed ? std::strtoull(env.c_str(), nullptr, 10)
                       : (uint64_t(std::random_device{}()) << 32) ^ std::random_device{}();
    std::printf("[%s] random seed %llu%s\n", tag, (unsigned long long)s,
                fixed ? " (DRIFTLESS_TEST_SEED)" : "");
    return s;
  }();
  static uint64_t counter = 0;
  return base + 7919 * ++counter;
}

// |x| + 0.25 elementwise, x an f64 cpu tensor (inputs or cotangents that cannot cancel).
inline Tensor positive(const Tensor& x) {
  std::vector<double> v = x.to_vector<double>();
  for (double& e : v) e = std::abs(e) + 0.25;
  return Tensor::from_vector(v, x.shape());
}

// The inputs of a backends-agree check as each side sees them: floating ones (f64 on the
// CPU) rounded to dt, then f32 on the CPU (f64 for f64) and dt on cuda; integer ones as they
// are (copied to cuda); undefined ones stay undefined.
inline void inputs_for(const std::vector<Tensor>& in, DType dt, std::vector<Tensor>& cpu_in,
                       std::vector<Tensor>& gpu_in) {
  const DType cpu_dt = dt == DType::f64 ? DType::f64 : DType::f32;
  for (const Tensor& t : in) {
    if (!t.defined()) {
      cpu_in.emplace_back();
      gpu_in.emplace_back();
    } else if (is_floating(t.dtype())) {
      Tensor rounded = t.to(dt);
      cpu_in.push_back(rounded.to(cpu_dt));
      gpu_in.push_back(rounded.to(Device::cuda));
    } else {
      cpu_in.push_back(t);
      gpu_in.push_back(t.to(Device::cuda));
    }
  }
}

// Fills the caching allocator's free lists with `copies` NaN blocks of every size class,
// so the next outputs of an op start as NaN wherever a kernel does not write.
inline void poison_cache(int copies = 4) {
  std::vector<Tensor> blocks;
  for (int64_t bytes = 512; bytes <= (int64_t(32) << 20); bytes *= 2)
    for (int k = 0; k < copies; ++k) {
      Tensor t = Tensor::empty({bytes / 4}, DType::f32, Device::cuda);
      t.fill_(std::nan(""));
      blocks.push_back(t);
    }
}

}  // namespace driftless::testing
