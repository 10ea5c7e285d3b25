// Backends agree (CONVENTIONS.md tier 2) for engine/core: transfers, strided copies,
// dtype conversion, fill and accumulate on cuda equal their CPU results bit for bit, and
// the caching allocator reuses blocks. Skips when no GPU is present.
#include <gtest/gtest.h>

#include "engine/core/device_ops.h"
#include "engine/core/tensor.h"
#ifdef DRIFTLESS_HAVE_CUDA
#include "engine/core/cuda/caching_allocator.h"
#include "engine/core/cuda/check.h"
#include "engine/core/cuda/stream.h"
#endif
#include "tests/gpu/gpu_test_util.h"

namespace driftless {
namespace {

TEST(CoreCuda, RoundTripEveryDtype) {
  DL_REQUIRE_GPU();
  for (DType dt : {DType::f32, DType::f64, DType::bf16, DType::i32, DType::i64}) {
    Tensor h = Tensor::randn({37, 5}, 3, DType::f64).to(dt);
    Tensor d = h.to(Device::cuda);
    EXPECT_EQ(d.device(), Device::cuda);
    EXPECT_EQ(d.to(Device::cpu).to_vector<double>(), h.to_vector<double>()) << dtype_name(dt);
  }
}

TEST(CoreCuda, StridedViewsAndConversionMatchCpu) {
  DL_REQUIRE_GPU();
  Tensor h = Tensor::randn({6, 7, 9}, 5);
  Tensor d = h.to(Device::cuda);
  Tensor hv = h.permute({2, 0, 1}).narrow(1, 1, 4);
  Tensor dv = d.permute({2, 0, 1}).narrow(1, 1, 4);
  EXPECT_EQ(dv.contiguous().to_vector<float>(), hv.contiguous().to_vector<float>());
  // Device-side bf16 conversion rounds exactly like the host conversion.
  EXPECT_EQ(dv.to(DType::bf16).to_vector<float>(), hv.to(DType::bf16).to_vector<float>());
  // Host -> strided device destination.
  Tensor target = Tensor::zeros({9, 6, 7}, DType::f32, Device::cuda);
  target.narrow(1, 2, 3).copy_(h.permute({2, 0, 1}).narrow(1, 1, 3));
  Tensor expect = Tensor::zeros({9, 6, 7});
  expect.narrow(1, 2, 3).copy_(h.permute({2, 0, 1}).narrow(1, 1, 3));
  EXPECT_EQ(target.to_vector<float>(), expect.to_vector<float>());
}

TEST(CoreCuda, FillAndAccumulate) {
  DL_REQUIRE_GPU();
  Tensor d = Tensor::full({129}, 1.5, DType::f32, Device::cuda);
  Tensor h = Tensor::randn({129}, 9);
  d.add_(h.to(Device::cuda));
  Tensor e = Tensor::full({129}, 1.5);
  e.add_(h);
  EXPECT_EQ(d.to_vector<float>(), e.to_vector<float>());
  d.narrow(0, 10, 5).zero_();
  auto v = d.to_vector<float>();
  EXPECT_EQ(v[9], e.to_vector<float>()[9]);
  for (int i = 10; i < 15; ++i) EXPECT_EQ(v[i], 0.0f);
  EXPECT_EQ(v[15], e.to_vector<float>()[15]);
}

#ifdef DRIFTLESS_HAVE_CUDA
TEST(CoreCuda, CachingAllocatorReusesBlocks) {
  DL_REQUIRE_GPU();
  auto& a = cuda::caching_allocator();
  { Tensor t = Tensor::empty({1 << 20}, DType::f32, Device::cuda); }
  size_t before = a.stats().system_allocations;
  for (int i = 0; i < 10; ++i) {
    Tensor t = Tensor::empty({1 << 20}, DType::f32, Device::cuda);
  }
  EXPECT_EQ(a.stats().system_allocations, before);
  EXPECT_GE(a.stats().bytes_reserved, size_t(4) << 20);
}

TEST(CoreCuda, CachingAllocatorKeepsStreamsApartAndEmptiesItsCache) {
  DL_REQUIRE_GPU();
  auto& a = cuda::caching_allocator();
  cuda::empty_cache();
  EXPECT_EQ(memory_stats(Device::cuda).bytes_cached, 0u);
  void* compute_block = nullptr;
  {
    Tensor t = Tensor::empty({3 << 18}, DType::f32, Device::cuda);
    compute_block = t.raw_data();
  }
  EXPECT_GE(memory_stats(Device::cuda).bytes_cached, size_t(3) << 20);
  const size_t before = a.stats().system_allocations;
  {
    // A block freed on the compute stream is not handed to another stream's allocation.
    cuda::Stream side;
    cuda::AllocationStreamGuard guard(side.get());
    Tensor t = Tensor::empty({3 << 18}, DType::f32, Device::cuda);
    EXPECT_NE(t.raw_data(), compute_block);
    EXPECT_EQ(a.stats().system_allocations, before + 1);
  }
  {
    Tensor t = Tensor::empty({3 << 18}, DType::f32, Device::cuda);  // compute stream again
    EXPECT_EQ(t.raw_data(), compute_block);
    EXPECT_EQ(a.stats().system_allocations, before + 1);
  }
  cuda::empty_cache();
  EXPECT_EQ(memory_stats(Device::cuda).bytes_cached, 0u);
}

TEST(CoreCuda, EventsOrderASideStreamAfterTheComputeStream) {
  DL_REQUIRE_GPU();
  Tensor x = Tensor::zeros({1 << 20}, DType::f32, Device::cuda);
  x.fill_(3.0);  // compute stream
  cuda::Event ready, done;
  ready.record(cuda::compute_stream());
  cuda::Stream side;
  side.wait(ready);
  Tensor host = Tensor::zeros({1 << 20}, DType::f32);
  DL_CUDA_CHECK(cudaMemcpyAsync(host.raw_data(), x.raw_data(), x.nbytes(), cudaMemcpyDeviceToHost,
                                side.get()));
  done.record(side.get());
  done.synchronize();
  EXPECT_TRUE(done.done());
  EXPECT_EQ(host.to_vector<float>()[12345], 3.0f);
}
#endif

}  // namespace
}  // namespace driftless
