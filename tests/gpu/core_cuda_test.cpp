// Backends agree (CONTRIBUTING.md tier 2) for engine/core: transfers, strided copies,
// dtype conversion, fill and accumulate on cuda equal their CPU results bit for bit, and
// the caching allocator reuses blocks. Skips when no GPU is present.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "engine/core/device_ops.h"
#include "engine/core/env.h"
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

// The fast paths of the copy kernel: memcpy for linear runs, 16-byte units for strided
// same-dtype rows of whole units (the K/V buffer's interleaved slices, column blocks), and
// the per-element kernel where rows are not whole units; also views of different shapes
// with the same element count (each view walked in its own row-major order).
TEST(CoreCuda, StridedCopyPathsMatchCpu) {
  DL_REQUIRE_GPU();
  for (DType dt : {DType::bf16, DType::f32}) {
    SCOPED_TRACE(dtype_name(dt));
    Tensor h = Tensor::randn({5, 6, 2, 3, 16}, 11).to(dt);  // like (B, S, 2, H_kv, D)
    Tensor d = h.to(Device::cuda);
    for (int64_t c : {0, 1}) {
      // (S, H_kv, D) of component c: rows 2 x 3 x 16 elements apart, each 48 contiguous.
      Tensor hv = h.select(0, 2).select(1, c), dv = d.select(0, 2).select(1, c);
      EXPECT_EQ(dv.contiguous().to_vector<double>(), hv.contiguous().to_vector<double>());
      // Into a strided destination from a contiguous source, and back.
      Tensor src = Tensor::randn({6, 3, 16}, 12 + uint64_t(c)).to(dt);
      Tensor hd = h.clone(), dd = d.clone();
      hd.select(0, 1).select(1, c).copy_(src);
      dd.select(0, 1).select(1, c).copy_(src.to(Device::cuda));
      EXPECT_EQ(dd.to_vector<double>(), hd.to_vector<double>());
    }
    // Rows of 6 elements (not whole 16-byte units in bf16): the per-element kernel.
    Tensor hn = h.narrow(4, 3, 6), dn = d.narrow(4, 3, 6);
    EXPECT_EQ(dn.contiguous().to_vector<double>(), hn.contiguous().to_vector<double>());
    // Same element count, different shapes: (10, 48) strided <- (480) linear.
    Tensor flat = Tensor::randn({480}, 13).to(dt);
    Tensor ht = Tensor::zeros({10, 96}, dt), dtt = Tensor::zeros({10, 96}, dt, Device::cuda);
    ht.narrow(1, 16, 48).copy_(flat.reshape({10, 48}));
    dtt.narrow(1, 16, 48).copy_(flat.to(Device::cuda).reshape({10, 48}));
    EXPECT_EQ(dtt.to_vector<double>(), ht.to_vector<double>());
    // Fill: zero (memset on a linear run), non-zero, and on a strided view.
    Tensor f = Tensor::full({7, 8}, 2.5, dt, Device::cuda);
    f.narrow(1, 1, 3).fill_(-1.0);
    f.narrow(0, 5, 2).zero_();
    Tensor fe = Tensor::full({7, 8}, 2.5, dt);
    fe.narrow(1, 1, 3).fill_(-1.0);
    fe.narrow(0, 5, 2).zero_();
    EXPECT_EQ(f.to_vector<double>(), fe.to_vector<double>());
  }
}

// NVML's energy counter through cuda::energy_joules: it grows while the GPU copies memory
// for 1.5 s, at a plausible power (a unit error of 1000x in either direction fails).
TEST(CoreCuda, EnergyCounterGrowsUnderLoad) {
  DL_REQUIRE_GPU();
  std::string why;
  const double j0 = cuda::energy_joules(&why);
  if (std::isnan(j0)) GTEST_SKIP() << "no energy counter: " << why;
  Tensor src = Tensor::zeros({int64_t(1) << 28}, DType::f32, Device::cuda);  // 1 GiB
  Tensor dst = Tensor::empty({int64_t(1) << 28}, DType::f32, Device::cuda);
  const auto t0 = std::chrono::steady_clock::now();
  double seconds = 0;
  while (seconds < 1.5) {
    for (int i = 0; i < 10; ++i) cuda::copy(dst, src);
    cuda::synchronize();
    seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  const double watts = (cuda::energy_joules(&why) - j0) / seconds;
  std::printf("[core cuda] %.0f W while copying memory for %.2f s\n", watts, seconds);
  EXPECT_GT(watts, 10.0) << why;
  EXPECT_LT(watts, 5000.0) << why;
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
  // Accumulation of linear runs goes in 16-byte units plus an element-wise tail; runs that
  // start off a 16-byte boundary go element-wise. Each dtype, the CPU's bits.
  for (DType dt : {DType::f32, DType::bf16, DType::f64})
    for (int64_t start : {0, 1}) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + " start " + std::to_string(start));
      Tensor a = Tensor::randn({1037}, 21).to(dt), b = Tensor::randn({1037}, 22).to(dt);
      Tensor ga = a.to(Device::cuda);
      ga.narrow(0, start, 1037 - start).add_(b.to(Device::cuda).narrow(0, start, 1037 - start));
      a.narrow(0, start, 1037 - start).add_(b.narrow(0, start, 1037 - start));
      EXPECT_EQ(ga.to_vector<double>(), a.to_vector<double>());
    }
  // plus: a fresh a + b, one 16-byte pass for aligned whole-unit runs, clone + add_ for the
  // rest (odd sizes, strided views); the CPU's bits either way, the operands untouched.
  for (DType dt : {DType::f32, DType::bf16})
    for (int64_t n : {int64_t(1024), int64_t(1037)}) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + " n " + std::to_string(n));
      Tensor a = Tensor::randn({n}, 31).to(dt), b = Tensor::randn({n}, 32).to(dt);
      Tensor ga = a.to(Device::cuda), gb = b.to(Device::cuda);
      Tensor s = ga.plus(gb);
      EXPECT_FALSE(s.shares_storage(ga));
      EXPECT_EQ(s.to_vector<double>(), a.plus(b).to_vector<double>());
      EXPECT_EQ(ga.to_vector<double>(), a.to_vector<double>());
      Tensor ta = Tensor::randn({8, 16}, 33).to(dt), tb = Tensor::randn({16, 8}, 34).to(dt);
      EXPECT_EQ(ta.to(Device::cuda).transpose(0, 1).plus(tb.to(Device::cuda)).to_vector<double>(),
                ta.transpose(0, 1).plus(tb).to_vector<double>());
    }
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

// Kernels launch through cuda::launch, which on sm_90 lets a kernel be placed before the
// one ahead of it ends (programmatic dependent launch); each must wait for that one's writes
// before it reads. A long chain in which every kernel reads what the one before wrote, of
// several kernel kinds (16-byte adds, strided copies, fills, fresh sums), gives the CPU's
// bits only if none reads early.
TEST(CoreCuda, DependentLaunchesSeeEveryEarlierWrite) {
  DL_REQUIRE_GPU();
  int device = 0, major = 0;
  DL_CUDA_CHECK(cudaGetDevice(&device));
  DL_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  EXPECT_EQ(cuda::dependent_launch_enabled(), major >= 9 && env_value("DRIFTLESS_PDL") != "0");
  auto chain = [](Tensor a, Tensor b) {
    for (int i = 0; i < 40; ++i) {
      a.add_(b);
      b.add_(a);
      b.narrow(0, 7, 300).fill_(double(i));
      a = a.reshape({512, 1024}).transpose(0, 1).contiguous().reshape({512 * 1024});
      b = b.plus(a);
    }
    return a.plus(b);
  };
  const Tensor a = Tensor::randn({512 * 1024}, 41), b = Tensor::randn({512 * 1024}, 42);
  const Tensor want = chain(a.clone(), b.clone());
  const int64_t before = cuda::dependent_launches();
  const Tensor got = chain(a.to(Device::cuda), b.to(Device::cuda));
  EXPECT_EQ(got.to_vector<float>(), want.to_vector<float>());
  // A build with sm_90a code on an sm_90 device really launches them early (the per-kernel
  // check finds the wait compiled in); with DRIFTLESS_PDL=0 or older devices none is.
  const int64_t early = cuda::dependent_launches() - before;
  if (!cuda::dependent_launch_enabled()) {
    EXPECT_EQ(early, 0);
  }
#ifdef DRIFTLESS_SM90A
  if (cuda::dependent_launch_enabled() && major == 9) {
    EXPECT_GE(early, 200);
  }
#endif
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
