// Deterministic reductions: sum over any set of dims (sum, mean, sum_to) and the
// two-pass sum / sum of squares over everything (sum_all, gradient norm). Every output
// is summed by one thread or one block in a fixed order; no atomics, so the same input
// gives the same bits on every run.
#include "engine/ops/cuda/common.cuh"

namespace driftless::ops::gpu {
namespace {

constexpr int kBlock = 256;
constexpr int kMaxParts = 1024;  // blocks of the first sum_all pass

__device__ __forceinline__ int64_t dims_offset(int rank, const int64_t* shape,
                                               const int64_t* strides, int64_t linear) {
  int64_t off = 0;
  for (int d = rank - 1; d >= 0; --d) {
    const int64_t i = linear % shape[d];
    linear /= shape[d];
    off += i * strides[d];
  }
  return off;
}

// One thread per output: used when there are many outputs (adjacent threads read
// adjacent kept elements, e.g. a bias gradient summed over rows).
template <class T>
__global__ void reduce_thread_kernel(const T* x, ReduceLayout L, T* out, double factor) {
  using A = acc_t<T>;
  for (int64_t o = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; o < L.n_out;
       o += int64_t(gridDim.x) * blockDim.x) {
    const T* base = x + dims_offset(L.kept_rank, L.kept_shape, L.kept_strides, o);
    A acc = 0;
    if (L.red_rank == 1) {
      for (int64_t r = 0; r < L.n_red; ++r) acc += to_acc(base[r * L.red_strides[0]]);
    } else {
      for (int64_t r = 0; r < L.n_red; ++r)
        acc += to_acc(base[dims_offset(L.red_rank, L.red_shape, L.red_strides, r)]);
    }
    out[o] = from_acc<T>(acc * A(factor));
  }
}

// One block per output: used when outputs are few and long.
template <class T>
__global__ void reduce_block_kernel(const T* x, ReduceLayout L, T* out, double factor) {
  using A = acc_t<T>;
  for (int64_t o = blockIdx.x; o < L.n_out; o += gridDim.x) {
    const T* base = x + dims_offset(L.kept_rank, L.kept_shape, L.kept_strides, o);
    A acc = 0;
    for (int64_t r = threadIdx.x; r < L.n_red; r += blockDim.x)
      acc += to_acc(base[dims_offset(L.red_rank, L.red_shape, L.red_strides, r)]);
    acc = block_sum(acc);
    if (threadIdx.x == 0) out[o] = from_acc<T>(acc * A(factor));
  }
}

template <class T, class A, bool Square>
__global__ void sum_parts_kernel(const T* x, int64_t n, A* parts) {
  A acc = 0;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const A v = A(to_acc(x[i]));
    acc += Square ? v * v : v;
  }
  acc = block_sum(acc);
  if (threadIdx.x == 0) parts[blockIdx.x] = acc;
}

template <class A, class O>
__global__ void sum_final_kernel(const A* parts, int nparts, O* out, double factor) {
  A acc = 0;
  for (int i = threadIdx.x; i < nparts; i += blockDim.x) acc += parts[i];
  acc = block_sum(acc);
  if (threadIdx.x == 0) *out = from_acc<O>(acc * A(factor));
}

}  // namespace

void launch_reduce(DType dtype, const void* x, const ReduceLayout& layout, void* out,
                   double factor) {
  if (layout.n_out == 0) return;
  dispatch_float("reduce", dtype, [&](auto z) {
    using T = decltype(z);
    const T* px = static_cast<const T*>(x);
    T* po = static_cast<T*>(out);
    // The choice depends on the shape only, so a given call always sums in one order.
    if (layout.n_out >= 1024 || layout.n_red <= 32) {
      reduce_thread_kernel<T><<<grid_for(layout.n_out, kBlock), kBlock>>>(px, layout, po, factor);
    } else {
      const int64_t blocks = layout.n_out < 65535 ? layout.n_out : 65535;
      reduce_block_kernel<T><<<unsigned(blocks), kBlock>>>(px, layout, po, factor);
    }
  });
  DL_CUDA_LAUNCH_CHECK();
}

int sum_all_parts(int64_t n) {
  int64_t parts = (n + kBlock * 8 - 1) / (kBlock * 8);
  if (parts < 1) parts = 1;
  return int(parts < kMaxParts ? parts : kMaxParts);
}

void launch_sum_all(DType dtype, const void* x, int64_t n, bool square, bool double_acc,
                    void* scratch, void* out, DType out_dtype, double factor) {
  const int parts = sum_all_parts(n);
  dispatch_float("sum_all", dtype, [&](auto z) {
    using T = decltype(z);
    auto run = [&](auto acc_zero) {
      using A = decltype(acc_zero);
      A* pp = static_cast<A*>(scratch);
      if (square)
        sum_parts_kernel<T, A, true><<<parts, kBlock>>>(static_cast<const T*>(x), n, pp);
      else
        sum_parts_kernel<T, A, false><<<parts, kBlock>>>(static_cast<const T*>(x), n, pp);
      DL_CUDA_LAUNCH_CHECK();
      dispatch_float("sum_all", out_dtype, [&](auto zo) {
        using O = decltype(zo);
        sum_final_kernel<A, O><<<1, 1024>>>(pp, parts, static_cast<O*>(out), factor);
      });
      DL_CUDA_LAUNCH_CHECK();
    };
    if (double_acc || std::is_same_v<T, double>)
      run(double{});
    else
      run(float{});
  });
}

}  // namespace driftless::ops::gpu
