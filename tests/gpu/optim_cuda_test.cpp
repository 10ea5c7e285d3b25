// Backends agree for the optimizer on cuda (CONTRIBUTING.md tier 2): AdamW's step, with and
// without the fused clipping factor and bf16 compute copy,
// give the CPU's bits. Skips when no GPU is present.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "engine/core/tensor.h"
#include "engine/optim/adamw.h"
#include "tests/gpu/gpu_test_util.h"

namespace driftless {
namespace {

TEST(OpsCuda, AdamWMatchesCpuBitwise) {
  DL_REQUIRE_GPU();
  const int64_t n = 100003;
  optim::AdamWConfig cfg;
  cfg.weight_decay = 0.1;
  std::vector<optim::ParamRange> ranges = {{"decayed", 0, 60000, true}, {"plain", 60000, n, false}};
  optim::AdamW cpu(cfg, ranges, n, Device::cpu), gpu(cfg, ranges, n, Device::cuda);
  Tensor p_cpu = Tensor::randn({n}, testing::fresh_seed("ops_cuda"));
  Tensor p_gpu = p_cpu.to(Device::cuda);
  for (int step = 0; step < 5; ++step) {
    Tensor g = Tensor::randn({n}, testing::fresh_seed("ops_cuda"), DType::f32, 0.0, 1e-2);
    cpu.step(p_cpu, g, 1e-3 * (step + 1));
    gpu.step(p_gpu, g.to(Device::cuda), 1e-3 * (step + 1));
  }
  EXPECT_EQ(p_gpu.to_vector<float>(), p_cpu.to_vector<float>());
  EXPECT_EQ(gpu.state().m.to_vector<float>(), cpu.state().m.to_vector<float>());
  EXPECT_EQ(gpu.state().v.to_vector<float>(), cpu.state().v.to_vector<float>());
}

// The fused pass (clipping factor and bf16 compute copy) on cuda: the bits of the CPU's
// fused pass, which the CPU test proves equal to the separate scale, step and copy. The
// first run goes four elements at a time with a one-element tail; the second starts off a
// 16-byte boundary and goes one at a time.
TEST(OpsCuda, AdamWWithScaleAndComputeCopyMatchesCpuBitwise) {
  DL_REQUIRE_GPU();
  const int64_t n = 70001;
  optim::AdamWConfig cfg;
  cfg.weight_decay = 0.1;
  std::vector<optim::ParamRange> ranges = {{"decayed", 0, 40001, true}, {"plain", 40001, n, false}};
  optim::AdamW cpu(cfg, ranges, n, Device::cpu), gpu(cfg, ranges, n, Device::cuda);
  Tensor p_cpu = Tensor::randn({n}, testing::fresh_seed("ops_cuda"));
  Tensor p_gpu = p_cpu.to(Device::cuda);
  Tensor c_cpu = Tensor::zeros({n}, DType::bf16),
         c_gpu = Tensor::zeros({n}, DType::bf16, Device::cuda);
  for (int step = 0; step < 3; ++step) {
    Tensor g = Tensor::randn({n}, testing::fresh_seed("ops_cuda"), DType::f32, 0.0, 1e-2);
    cpu.step(p_cpu, g, 1e-3, 0.37 + 0.1 * step, c_cpu);
    gpu.step(p_gpu, g.to(Device::cuda), 1e-3, 0.37 + 0.1 * step, c_gpu);
  }
  EXPECT_EQ(p_gpu.to_vector<float>(), p_cpu.to_vector<float>());
  EXPECT_EQ(c_gpu.to_vector<float>(), c_cpu.to_vector<float>());
  EXPECT_EQ(gpu.state().m.to_vector<float>(), cpu.state().m.to_vector<float>());
}

// One launch covers every run (AdamW's cuda path): many runs of GPT-like and odd sizes,
// alternating decay, runs longer than a block's chunk and shorter than one thread's eight,
// on the whole slab and on a ZeRO-1 shard whose odd start leaves no 16-byte access: the
// bits of the CPU's run-by-run update either way.
TEST(OpsCuda, AdamWOverManyRunsMatchesCpuBitwise) {
  DL_REQUIRE_GPU();
  std::vector<optim::ParamRange> ranges;
  int64_t n = 0;
  for (int64_t len : {768, 2304, 5, 3072, 1, 4099, 768, 768, 9000, 3, 2048, 2047}) {
    ranges.push_back({"r" + std::to_string(ranges.size()), n, n + len, ranges.size() % 2 == 0});
    n += len;
  }
  optim::AdamWConfig cfg;
  cfg.weight_decay = 0.1;
  for (auto [begin, end] : {std::pair<int64_t, int64_t>{0, n}, {13, n - 7}}) {
    SCOPED_TRACE("shard [" + std::to_string(begin) + ", " + std::to_string(end) + ")");
    optim::AdamW cpu(cfg, ranges, n, begin, end, Device::cpu);
    optim::AdamW gpu(cfg, ranges, n, begin, end, Device::cuda);
    Tensor p_cpu = Tensor::randn({n}, testing::fresh_seed("ops_cuda"));
    Tensor p_gpu = p_cpu.to(Device::cuda);
    Tensor c_cpu = Tensor::zeros({n}, DType::bf16);
    Tensor c_gpu = Tensor::zeros({n}, DType::bf16, Device::cuda);
    for (int step = 0; step < 3; ++step) {
      Tensor g = Tensor::randn({n}, testing::fresh_seed("ops_cuda"), DType::f32, 0.0, 1e-2);
      cpu.step(p_cpu, g, 1e-3 * (step + 1), 0.5, c_cpu);
      gpu.step(p_gpu, g.to(Device::cuda), 1e-3 * (step + 1), 0.5, c_gpu);
    }
    EXPECT_EQ(p_gpu.to_vector<float>(), p_cpu.to_vector<float>());
    EXPECT_EQ(c_gpu.to_vector<float>(), c_cpu.to_vector<float>());
    EXPECT_EQ(gpu.state().m.to_vector<float>(), cpu.state().m.to_vector<float>());
    EXPECT_EQ(gpu.state().v.to_vector<float>(), cpu.state().v.to_vector<float>());
  }
}

}  // namespace
}  // namespace driftless
