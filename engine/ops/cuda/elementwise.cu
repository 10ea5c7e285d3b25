// Broadcasting elementwise kernels (add, sub, mul, gelu backward) and unary kernels
// (copy/broadcast_to, scale, add_scalar, neg, gelu, dropout). f32 and f64 do the same
// arithmetic as the CPU bodies (scalars applied in double, then rounded), so those agree
// bit for bit; gelu differs only by the device tanh.
#include "engine/core/cuda/launch.cuh"
#include "engine/core/random.h"
#include "engine/ops/cuda/common.cuh"
#include "engine/ops/cuda/elementwise.h"

namespace driftless::ops::gpu {
namespace {

constexpr double kSqrt2OverPi = 0.7978845608028654;
constexpr double kGeluCoeff = 0.044715;

template <class A>
__device__ __forceinline__ A tanh_acc(A u) {
  if constexpr (std::is_same_v<A, double>) {
    return tanh(u);
  } else {
    return tanhf(u);
  }
}

template <class T, BinaryKind K, int M>
__global__ void binary_kernel(Layout layout, const T* a, Strides sa, const T* b, Strides sb, T* out,
                              int64_t n) {
  cuda::dependent_kernel_begin();
  using A = acc_t<T>;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t oa = operand_offset<M>(layout, sa, i);
    const int64_t ob = operand_offset<M>(layout, sb, i);
    const A x = to_acc(a[oa]), y = to_acc(b[ob]);
    A r;
    if constexpr (K == BinaryKind::add) {
      r = x + y;
    } else if constexpr (K == BinaryKind::sub) {
      r = x - y;
    } else if constexpr (K == BinaryKind::mul) {
      r = x * y;
    } else {  // gelu backward: x = g, y = input
      const A u = A(kSqrt2OverPi) * (y + A(kGeluCoeff) * y * y * y);
      const A t = tanh_acc(u);
      const A du = A(kSqrt2OverPi) * (A(1) + A(3 * kGeluCoeff) * y * y);
      r = x * (A(0.5) * (A(1) + t) + A(0.5) * y * (A(1) - t * t) * du);
    }
    out[i] = from_acc<T>(r);
  }
}

template <class T, UnaryKind K, int M>
__global__ void unary_kernel(Layout layout, const T* x, Strides sx, T* out, int64_t n, double s) {
  cuda::dependent_kernel_begin();
  using A = acc_t<T>;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const T v = x[operand_offset<M>(layout, sx, i)];
    if constexpr (K == UnaryKind::copy) {
      out[i] = v;
    } else if constexpr (K == UnaryKind::scale) {
      out[i] = from_acc<T>(double(to_acc(v)) * s);
    } else if constexpr (K == UnaryKind::add_scalar) {
      out[i] = from_acc<T>(double(to_acc(v)) + s);
    } else if constexpr (K == UnaryKind::neg) {
      out[i] = from_acc<T>(-to_acc(v));
    } else {  // gelu
      const A w = to_acc(v);
      out[i] = from_acc<T>(A(0.5) * w *
                           (A(1) + tanh_acc(A(kSqrt2OverPi) * (w + A(kGeluCoeff) * w * w * w))));
    }
  }
}

// The counter of element i is its row's global id times row_len plus its column, as in the
// CPU body (dropout.cpp), so both draw the same mask.
template <class T, int M>
__global__ void dropout_kernel(Layout layout, const T* x, Strides sx, T* out, int64_t n,
                               const int64_t* row_ids, int64_t row_len, double keep_scale, double p,
                               uint64_t seed) {
  cuda::dependent_kernel_begin();
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const T v = x[operand_offset<M>(layout, sx, i)];
    const uint64_t counter =
        uint64_t(row_ids[i / row_len]) * uint64_t(row_len) + uint64_t(i % row_len);
    const bool keep = random::uniform01(seed, counter) >= p;
    out[i] = keep ? from_acc<T>(double(to_acc(v)) * keep_scale) : from_acc<T>(0.0);
  }
}

}  // namespace

void launch_binary(BinaryKind kind, DType dtype, const Layout& layout, bool dense, const void* a,
                   const Strides& sa, const void* b, const Strides& sb, void* out, int64_t n) {
  if (n == 0) return;
  const int mode = index_mode(dense, layout, {&sa, &sb}, n);
  dispatch_float("elementwise", dtype, [&](auto z) {
    using T = decltype(z);
    with_index_mode(mode, [&](auto m) {
      constexpr int M = decltype(m)::value;
      auto go = [&](auto kernel) {
        cuda::launch(kernel, grid_for(n, 256), 256, 0, layout, static_cast<const T*>(a), sa,
                     static_cast<const T*>(b), sb, static_cast<T*>(out), n);
      };
      switch (kind) {
        case BinaryKind::add:
          return go(binary_kernel<T, BinaryKind::add, M>);
        case BinaryKind::sub:
          return go(binary_kernel<T, BinaryKind::sub, M>);
        case BinaryKind::mul:
          return go(binary_kernel<T, BinaryKind::mul, M>);
        case BinaryKind::gelu_backward:
          return go(binary_kernel<T, BinaryKind::gelu_backward, M>);
      }
    });
  });
  DL_CUDA_LAUNCH_CHECK();
}

void launch_unary(UnaryKind kind, DType dtype, const Layout& layout, bool dense, const void* x,
                  const Strides& sx, void* out, int64_t n, double s) {
  if (n == 0) return;
  const int mode = index_mode(dense, layout, {&sx}, n);
  dispatch_float("elementwise", dtype, [&](auto z) {
    using T = decltype(z);
    with_index_mode(mode, [&](auto m) {
      constexpr int M = decltype(m)::value;
      auto go = [&](auto kernel) {
        cuda::launch(kernel, grid_for(n, 256), 256, 0, layout, static_cast<const T*>(x), sx,
                     static_cast<T*>(out), n, s);
      };
      switch (kind) {
        case UnaryKind::copy:
          return go(unary_kernel<T, UnaryKind::copy, M>);
        case UnaryKind::scale:
          return go(unary_kernel<T, UnaryKind::scale, M>);
        case UnaryKind::add_scalar:
          return go(unary_kernel<T, UnaryKind::add_scalar, M>);
        case UnaryKind::neg:
          return go(unary_kernel<T, UnaryKind::neg, M>);
        case UnaryKind::gelu:
          return go(unary_kernel<T, UnaryKind::gelu, M>);
      }
    });
  });
  DL_CUDA_LAUNCH_CHECK();
}

void launch_dropout(DType dtype, const Layout& layout, bool dense, const void* x, const Strides& sx,
                    void* out, int64_t n, const int64_t* row_ids, int64_t row_len,
                    double keep_scale, double p, uint64_t seed) {
  if (n == 0) return;
  const int mode = index_mode(dense, layout, {&sx}, n);
  dispatch_float("dropout", dtype, [&](auto z) {
    using T = decltype(z);
    with_index_mode(mode, [&](auto m) {
      constexpr int M = decltype(m)::value;
      cuda::launch(dropout_kernel<T, M>, grid_for(n, 256), 256, 0, layout, static_cast<const T*>(x),
                   sx, static_cast<T*>(out), n, row_ids, row_len, keep_scale, p, seed);
    });
  });
  DL_CUDA_LAUNCH_CHECK();
}

namespace {

// One element of launch_scaled_f32: the product rounded on its own (no FMA with the add),
// as a mul kernel followed by an add or a bf16 copy would round it.
template <bool Accumulate>
__device__ __forceinline__ void put_scaled(void* dst, int64_t i, float v, float s) {
  const float r = __fmul_rn(v, s);
  if constexpr (Accumulate)
    static_cast<float*>(dst)[i] = __fadd_rn(static_cast<float*>(dst)[i], r);
  else
    static_cast<bf16_t*>(dst)[i] = from_acc<bf16_t>(r);
}

template <bool Accumulate>
__global__ void scaled_f32_kernel(const float* src, const float* scale, void* dst, int64_t n,
                                  bool quads) {
  cuda::dependent_kernel_begin();
  const float s = *scale;
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  int64_t first = 0;
  if (quads) {  // 16-byte loads, 16-byte (f32) or 8-byte (bf16) stores
    const int64_t nq = n / 4;
    for (int64_t q = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; q < nq; q += stride) {
      const float4 v = reinterpret_cast<const float4*>(src)[q];
      if constexpr (Accumulate) {
        float4& d = reinterpret_cast<float4*>(dst)[q];
        float4 o = d;
        o.x = __fadd_rn(o.x, __fmul_rn(v.x, s));
        o.y = __fadd_rn(o.y, __fmul_rn(v.y, s));
        o.z = __fadd_rn(o.z, __fmul_rn(v.z, s));
        o.w = __fadd_rn(o.w, __fmul_rn(v.w, s));
        d = o;
      } else {
        reinterpret_cast<uint2*>(dst)[q] =
            make_uint2(pack_bf16x2(__fmul_rn(v.x, s), __fmul_rn(v.y, s)),
                       pack_bf16x2(__fmul_rn(v.z, s), __fmul_rn(v.w, s)));
      }
    }
    first = nq * 4;
  }
  for (int64_t i = first + blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += stride)
    put_scaled<Accumulate>(dst, i, src[i], s);
}

}  // namespace

void launch_scaled_f32(const float* src, const float* scale, void* dst, DType dst_dtype,
                       int64_t n) {
  if (n == 0) return;
  const bool quads = reinterpret_cast<uintptr_t>(src) % 16 == 0 &&
                     reinterpret_cast<uintptr_t>(dst) % (dst_dtype == DType::f32 ? 16 : 8) == 0;
  const int64_t threads = quads ? (n + 3) / 4 : n;
  if (dst_dtype == DType::f32)
    cuda::launch(scaled_f32_kernel<true>, grid_for(threads, 256), 256, 0, src, scale, dst, n,
                 quads);
  else
    cuda::launch(scaled_f32_kernel<false>, grid_for(threads, 256), 256, 0, src, scale, dst, n,
                 quads);
  DL_CUDA_LAUNCH_CHECK();
}

void launch_scale_inplace(DType dtype, void* p, int64_t n, double factor) {
  if (n == 0) return;
  // Same arithmetic as clip.cpp's CPU body: p[i] *= T(factor), in T.
  dispatch_float("scale_grads", dtype, [&](auto z) {
    using T = decltype(z);
    Layout layout;
    layout.rank = 1;
    layout.shape[0] = n;
    if constexpr (std::is_same_v<T, bf16_t>) {
      cuda::launch(unary_kernel<T, UnaryKind::scale, kDense>, grid_for(n, 256), 256, 0, layout,
                   static_cast<const T*>(p), Strides{}, static_cast<T*>(p), n, factor);
    } else {
      // T(v * T(factor)) in T, not in double: that is what `p[i] *= f` does on the host.
      cuda::launch(unary_kernel<T, UnaryKind::scale, kDense>, grid_for(n, 256), 256, 0, layout,
                   static_cast<const T*>(p), Strides{}, static_cast<T*>(p), n, double(T(factor)));
    }
  });
  DL_CUDA_LAUNCH_CHECK();
}

}  // namespace driftless::ops::gpu
