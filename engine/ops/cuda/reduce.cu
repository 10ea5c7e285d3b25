// Deterministic reductions: sum over any set of dims (sum, mean, sum_to), the two-pass
// sum / sum of squares over everything (sum_all, gradient norm) and a Linear's bias
// gradient (column sums added into f32 storage). Every output is summed in an order fixed
// by the shape; no atomics, so the same input gives the same bits on every run.
#include <algorithm>
#include <climits>
#include <cstdint>

#include "engine/core/cuda/launch.cuh"
#include "engine/ops/cuda/common.cuh"
#include "engine/ops/cuda/reduce.h"

namespace driftless::ops::gpu {
namespace {

using ::driftless::cuda::strided_offset;

constexpr int kBlock = 256;
constexpr int kMaxParts = 1024;  // blocks of the first sum_all pass

// Sum of reduced elements [r0, r1) of the output whose kept offset is `base`.
template <class T, class A>
__device__ __forceinline__ A sum_rows(const T* base, const ReduceLayout& L, int64_t r0,
                                      int64_t r1) {
  A acc = 0;
  if (L.red_rank == 1) {
    const int64_t st = L.red_strides[0];
    for (int64_t r = r0; r < r1; ++r) acc += to_acc(base[r * st]);
  } else {
    for (int64_t r = r0; r < r1; ++r)
      acc += to_acc(base[strided_offset<int64_t>(L.red_rank, L.red_shape, L.red_strides, r)]);
  }
  return acc;
}

// One thread per output: used when there are many outputs (adjacent threads read
// adjacent kept elements, e.g. a broadcast bias's gradient summed over rows).
template <class T>
__global__ void reduce_thread_kernel(const T* x, ReduceLayout L, T* out, double factor) {
  cuda::dependent_kernel_begin();
  using A = acc_t<T>;
  for (int64_t o = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; o < L.n_out;
       o += int64_t(gridDim.x) * blockDim.x) {
    const T* base = x + strided_offset<int64_t>(L.kept_rank, L.kept_shape, L.kept_strides, o);
    out[o] = from_acc<T>(sum_rows<T, A>(base, L, 0, L.n_red) * A(factor));
  }
}

// The thread-per-output sum in two passes when outputs are too few to fill the GPU (a
// broadcast bias's gradient: a few thousand outputs, each a sum over ~10^4 rows): pass 1 gives each
// (chunk of rows, output) pair a thread and writes its partial sum to scratch, pass 2 sums
// each output's chunks in order. The chunking depends on the shape only: deterministic.
template <class T>
__global__ void reduce_chunk_kernel(const T* x, ReduceLayout L, int64_t rows_per_chunk,
                                    int64_t chunks, acc_t<T>* parts) {
  cuda::dependent_kernel_begin();
  using A = acc_t<T>;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < L.n_out * chunks;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t o = i % L.n_out, c = i / L.n_out;
    const T* base = x + strided_offset<int64_t>(L.kept_rank, L.kept_shape, L.kept_strides, o);
    const int64_t r0 = c * rows_per_chunk, r1 = min(r0 + rows_per_chunk, L.n_red);
    parts[i] = sum_rows<T, A>(base, L, r0, r1);
  }
}

template <class T>
__global__ void reduce_parts_kernel(const acc_t<T>* parts, int64_t n_out, int64_t chunks, T* out,
                                    double factor) {
  cuda::dependent_kernel_begin();
  using A = acc_t<T>;
  col_sums(parts, chunks, n_out, [&](int64_t o, A v) { out[o] = from_acc<T>(v * A(factor)); });
}

// One block per output: used when outputs are few and long.
template <class T>
__global__ void reduce_block_kernel(const T* x, ReduceLayout L, T* out, double factor) {
  cuda::dependent_kernel_begin();
  using A = acc_t<T>;
  for (int64_t o = blockIdx.x; o < L.n_out; o += gridDim.x) {
    const T* base = x + strided_offset<int64_t>(L.kept_rank, L.kept_shape, L.kept_strides, o);
    A acc = 0;
    for (int64_t r = threadIdx.x; r < L.n_red; r += blockDim.x)
      acc += to_acc(base[strided_offset<int64_t>(L.red_rank, L.red_shape, L.red_strides, r)]);
    acc = block_sum(acc);
    if (threadIdx.x == 0) out[o] = from_acc<T>(acc * A(factor));
  }
}

template <class T, class A, bool Square>
__global__ void sum_parts_kernel(const T* x, int64_t n, A* parts) {
  cuda::dependent_kernel_begin();
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
  cuda::dependent_kernel_begin();
  A acc = 0;
  for (int i = threadIdx.x; i < nparts; i += blockDim.x) acc += parts[i];
  acc = block_sum(acc);
  if (threadIdx.x == 0) *out = from_acc<O>(acc * A(factor));
}

// Bias gradients: db (n) += the column sums of a (rows, n) row-major matrix. A block of
// kBgThreads covers 32 * V columns (lane l: columns l V .. l V + V - 1, one 16-byte pack per
// row where V > 1) over one chunk of kBgChunkRows rows, its kBgRowLanes warps taking every
// kBgRowLanes-th row of the chunk in order, kBgBatch rows loaded before any is added; the
// warps' sums are added in warp order into the chunk's partial, and col_sums adds the
// chunks in order. Each column is summed in the same order whatever V, so alignment does
// not change the bits. (cuBLASLt's BGRADB epilogue ran these sums as a kernel of its own
// too, at about half the memory bandwidth, and wrote them to be added to the gradient.)
constexpr int kBgRowLanes = 8;
constexpr int kBgThreads = 32 * kBgRowLanes;
constexpr int64_t kBgChunkRows = 64;
constexpr int kBgBatch = 4;

template <class T, int V>
__device__ __forceinline__ void load_cols(const T* p, float (&v)[V]) {
  if constexpr (V == 1) {
    v[0] = to_acc(*p);
  } else {
    static_assert(V * sizeof(T) == 16, "V is one 16-byte pack");
    const uint4 raw = *reinterpret_cast<const uint4*>(p);
    const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
    for (int j = 0; j < V; ++j) v[j] = to_acc(e[j]);
  }
}

template <class T, int V>
__global__ void __launch_bounds__(kBgThreads)
    bias_grad_partial_kernel(const T* __restrict__ x, int64_t rows, int64_t n,
                             float* __restrict__ parts) {
  cuda::dependent_kernel_begin();
  const int lane = threadIdx.x & 31, ty = threadIdx.x >> 5;
  const int64_t c0 = (int64_t(blockIdx.y) * 32 + lane) * V;
  const int64_t r0 = int64_t(blockIdx.x) * kBgChunkRows, r1 = min(rows, r0 + kBgChunkRows);
  float acc[V];
#pragma unroll
  for (int j = 0; j < V; ++j) acc[j] = 0.0f;
  if (c0 < n) {  // V divides n (the launcher's rule): a started pack is whole
    int64_t r = r0 + ty;
    for (; r + (kBgBatch - 1) * kBgRowLanes < r1; r += kBgBatch * kBgRowLanes) {
      float v[kBgBatch][V];
#pragma unroll
      for (int u = 0; u < kBgBatch; ++u) load_cols<T, V>(x + (r + u * kBgRowLanes) * n + c0, v[u]);
#pragma unroll
      for (int u = 0; u < kBgBatch; ++u)
#pragma unroll
        for (int j = 0; j < V; ++j) acc[j] += v[u][j];
    }
    for (; r < r1; r += kBgRowLanes) {
      float v[V];
      load_cols<T, V>(x + r * n + c0, v);
#pragma unroll
      for (int j = 0; j < V; ++j) acc[j] += v[j];
    }
  }
  __shared__ float part[kBgRowLanes][32 * V];
#pragma unroll
  for (int j = 0; j < V; ++j) part[ty][lane * V + j] = acc[j];
  __syncthreads();
  for (int t = threadIdx.x; t < 32 * V; t += kBgThreads) {
    const int64_t c = int64_t(blockIdx.y) * 32 * V + t;
    if (c >= n) break;
    float sum = part[0][t];
#pragma unroll
    for (int w = 1; w < kBgRowLanes; ++w) sum += part[w][t];
    parts[int64_t(blockIdx.x) * n + c] = sum;
  }
}

__global__ void bias_grad_final_kernel(const float* parts, int64_t chunks, int64_t n, float* db) {
  cuda::dependent_kernel_begin();
  col_sums(parts, chunks, n, [&](int64_t c, float v) { db[c] += v; });
}

template <class T, int V>
void launch_bias_grad_passes(const T* x, int64_t rows, int64_t n, float* db, float* scratch) {
  const int64_t col_blocks = (n + 32 * V - 1) / (32 * V), chunks = bias_grad_chunks(rows);
  DL_CHECK(col_blocks <= 65535 && chunks <= INT32_MAX, "linear",
           "(" << rows << ", " << n << ") is too large for the cuda bias-gradient grid");
  cuda::launch(bias_grad_partial_kernel<T, V>, dim3(unsigned(chunks), unsigned(col_blocks)),
               kBgThreads, 0, x, rows, n, scratch);
  DL_CUDA_LAUNCH_CHECK();
  cuda::launch(bias_grad_final_kernel, col_sum_blocks(n), kColSumThreads, 0, scratch, chunks, n,
               db);
  DL_CUDA_LAUNCH_CHECK();
}

}  // namespace

int64_t bias_grad_chunks(int64_t rows) {
  return std::max<int64_t>(1, (rows + kBgChunkRows - 1) / kBgChunkRows);
}

void launch_bias_grad(DType dtype, const void* dy, int64_t rows, int64_t n, float* db,
                      float* scratch) {
  if (rows == 0 || n == 0) return;
  auto go = [&](auto z) {
    using T = decltype(z);
    constexpr int P = 16 / int(sizeof(T));
    const T* x = static_cast<const T*>(dy);
    if (n % P == 0 && reinterpret_cast<uintptr_t>(dy) % 16 == 0)
      launch_bias_grad_passes<T, P>(x, rows, n, db, scratch);
    else
      launch_bias_grad_passes<T, 1>(x, rows, n, db, scratch);
  };
  if (dtype == DType::bf16)
    go(bf16_t{});
  else if (dtype == DType::f32)
    go(float{});
  else
    DL_FAIL("linear", "the bias-gradient kernel takes f32 or bf16, got " << dtype_name(dtype));
}

int64_t reduce_chunks(const ReduceLayout& layout) {
  // Chunked when outputs are adjacent in memory (threads of a warp read one row
  // coalesced) but too few for a thread each to fill the GPU, and each is a long sum.
  // Chunks of at least 64 rows, about kFill threads in all. (A bias gradient of width 768
  // went through one block per output before, each block reading a column: uncoalesced.)
  constexpr int64_t kFill = 128 * 1024;
  const bool adjacent = layout.kept_rank >= 1 && layout.kept_strides[layout.kept_rank - 1] == 1;
  if (!adjacent || layout.n_out >= kFill || layout.n_red < 256) return 1;
  const int64_t by_fill = (kFill + layout.n_out - 1) / layout.n_out;
  return std::max<int64_t>(1, std::min(by_fill, layout.n_red / 64));
}

void launch_reduce(DType dtype, const void* x, const ReduceLayout& layout, void* out, double factor,
                   void* scratch) {
  if (layout.n_out == 0) return;
  dispatch_float("reduce", dtype, [&](auto z) {
    using T = decltype(z);
    const T* px = static_cast<const T*>(x);
    T* po = static_cast<T*>(out);
    // The choice depends on the shape only, so a given call always sums in one order.
    const int64_t chunks = reduce_chunks(layout);
    if (chunks > 1) {
      DL_CHECK(scratch != nullptr, "reduce", "the chunked reduction needs scratch");
      const int64_t per = (layout.n_red + chunks - 1) / chunks;
      auto* parts = static_cast<acc_t<T>*>(scratch);
      cuda::launch(reduce_chunk_kernel<T>, grid_for(layout.n_out * chunks, kBlock), kBlock, 0, px,
                   layout, per, chunks, parts);
      DL_CUDA_LAUNCH_CHECK();
      cuda::launch(reduce_parts_kernel<T>, col_sum_blocks(layout.n_out), kColSumThreads, 0, parts,
                   layout.n_out, chunks, po, factor);
    } else if (layout.n_out >= 1024 || layout.n_red <= 32) {
      cuda::launch(reduce_thread_kernel<T>, grid_for(layout.n_out, kBlock), kBlock, 0, px, layout,
                   po, factor);
    } else {
      const int64_t blocks = layout.n_out < 65535 ? layout.n_out : 65535;
      cuda::launch(reduce_block_kernel<T>, unsigned(blocks), kBlock, 0, px, layout, po, factor);
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
        cuda::launch(sum_parts_kernel<T, A, true>, parts, kBlock, 0, static_cast<const T*>(x), n,
                     pp);
      else
        cuda::launch(sum_parts_kernel<T, A, false>, parts, kBlock, 0, static_cast<const T*>(x), n,
                     pp);
      DL_CUDA_LAUNCH_CHECK();
      dispatch_float("sum_all", out_dtype, [&](auto zo) {
        using O = decltype(zo);
        cuda::launch(sum_final_kernel<A, O>, 1, 1024, 0, pp, parts, static_cast<O*>(out), factor);
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
