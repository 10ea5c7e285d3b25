// Helpers shared by the op files (not public API): input checks with "[op] ..." errors, the
// device check that is each op's single dispatch point (device_of), the f32/f64 dtype
// dispatch of the CPU bodies, broadcast iteration, and the layouts the CUDA launchers take.
#pragma once
#include <array>
#include <initializer_list>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "engine/autograd/autograd.h"
#include "engine/core/tensor.h"
#include "engine/ops/cuda/elementwise.h"

namespace driftless::ops::detail {

// Every op calls this once before computing: all defined inputs must be on one device,
// which it returns; the op then runs its CPU body or its CUDA body (the `gpu` block of its
// file). This is the one place per op that picks the backend.
inline Device device_of(const char* op, std::initializer_list<Tensor> tensors) {
  const Tensor* first = nullptr;
  for (const Tensor& t : tensors) {
    if (!t.defined()) continue;
    if (!first) {
      first = &t;
      continue;
    }
    DL_CHECK(t.device() == first->device(), op,
             "inputs must be on one device, got a "
                 << device_name(first->device()) << " tensor of shape " << shape_str(first->shape())
                 << " and a " << device_name(t.device()) << " tensor of shape "
                 << shape_str(t.shape()));
  }
  const Device dev = first ? first->device() : Device::cpu;
#ifndef DRIFTLESS_HAVE_CUDA
  DL_CHECK(dev == Device::cpu, op,
           "no CUDA backend: this driftless was built without CUDA, got a cuda tensor of shape "
               << shape_str(first->shape()));
#endif
  return dev;
}

inline void require_defined(const char* op, const Tensor& t, const char* name) {
  DL_CHECK(t.defined(), op, name << " is an undefined tensor");
}

// f32 or f64; bf16 too on cuda (CPU kernels have no bf16 body).
inline void require_float(const char* op, const Tensor& t, const char* name) {
  require_defined(op, t, name);
  const bool bf16_ok = t.dtype() == DType::bf16 && t.device() == Device::cuda;
  DL_CHECK(t.dtype() == DType::f32 || t.dtype() == DType::f64 || bf16_ok, op,
           name << " must be f32 or f64 (or bf16 on cuda), got " << dtype_name(t.dtype()) << " on "
                << device_name(t.device()) << " of shape " << shape_str(t.shape()));
}

inline void require_int(const char* op, const Tensor& t, const char* name) {
  require_defined(op, t, name);
  DL_CHECK(t.dtype() == DType::i32 || t.dtype() == DType::i64, op,
           name << " must be i32 or i64, got " << dtype_name(t.dtype()) << " of shape "
                << shape_str(t.shape()));
}

inline void require_same_dtype(const char* op, const Tensor& a, const char* an, const Tensor& b,
                               const char* bn) {
  DL_CHECK(a.dtype() == b.dtype(), op,
           an << " " << shape_str(a.shape()) << " is " << dtype_name(a.dtype()) << " but " << bn
              << " " << shape_str(b.shape()) << " is " << dtype_name(b.dtype()));
}

// Calls f(T{}) with T = float or double.
template <class F>
decltype(auto) dispatch_float(const char* op, DType dtype, F&& f) {
  if (dtype == DType::f64) return f(double{});
  DL_CHECK(dtype == DType::f32, op, "no cpu kernel for dtype " << dtype_name(dtype));
  return f(float{});
}

// Calls f(I{}) with I = int32_t or int64_t.
template <class F>
decltype(auto) dispatch_int(const char* op, DType dtype, F&& f) {
  if (dtype == DType::i64) return f(int64_t{});
  DL_CHECK(dtype == DType::i32, op, "no index kernel for dtype " << dtype_name(dtype));
  return f(int32_t{});
}

// A dim splits a contiguous tensor into (outer, n, inner).
struct Dims3 {
  int64_t outer = 1, n = 1, inner = 1;
};
inline Dims3 dims3(const Shape& shape, int64_t d) {
  Dims3 r;
  for (int64_t i = 0; i < d; ++i) r.outer *= shape[i];
  r.n = shape[d];
  for (size_t i = size_t(d) + 1; i < shape.size(); ++i) r.inner *= shape[i];
  return r;
}

// Numpy broadcast of two shapes; throws naming op and both shapes.
inline Shape broadcast_shape(const char* op, const Shape& a, const Shape& b) {
  size_t r = std::max(a.size(), b.size());
  Shape out(r);
  for (size_t i = 0; i < r; ++i) {
    int64_t da = i < r - a.size() ? 1 : a[i - (r - a.size())];
    int64_t db = i < r - b.size() ? 1 : b[i - (r - b.size())];
    DL_CHECK(da == db || da == 1 || db == 1, op,
             "shapes " << shape_str(a) << " and " << shape_str(b) << " do not broadcast (dim " << i
                       << ": " << da << " vs " << db << ")");
    out[i] = da == 1 ? db : da;
  }
  return out;
}

// Strides (in elements) that read a tensor of `shape` and `strides` as if broadcast to
// `out` (stride 0 along broadcast dims). `out` must be a valid broadcast of `shape`.
inline Shape broadcast_strides(const Shape& shape, const Shape& strides, const Shape& out) {
  Shape st(out.size(), 0);
  size_t lead = out.size() - shape.size();
  for (size_t i = 0; i < shape.size(); ++i) st[lead + i] = shape[i] == 1 ? 0 : strides[i];
  return st;
}

// Calls f(i, offs) for every element of `out` in row-major order, i the linear index and
// offs[k] the element offset into operand k (given its broadcast strides).
template <size_t K, class F>
void for_each_broadcast(const Shape& out, const std::array<Shape, K>& strides, F&& f) {
  const int64_t n = shape_numel(out);
  if (n == 0) return;
  const int64_t rank = int64_t(out.size());
  if (rank == 0) {
    f(int64_t(0), std::array<int64_t, K>{});
    return;
  }
  std::vector<int64_t> idx(rank, 0);
  std::array<int64_t, K> offs{};
  const int64_t last = out[rank - 1];
  std::array<int64_t, K> step;
  for (size_t k = 0; k < K; ++k) step[k] = strides[k][rank - 1];
  for (int64_t i = 0; i < n; i += last) {
    std::array<int64_t, K> o = offs;
    for (int64_t j = 0; j < last; ++j) {
      f(i + j, o);
      for (size_t k = 0; k < K; ++k) o[k] += step[k];
    }
    for (int64_t d = rank - 2; d >= 0; --d) {
      if (++idx[d] < out[d]) {
        for (size_t k = 0; k < K; ++k) offs[k] += strides[k][d];
        break;
      }
      for (size_t k = 0; k < K; ++k) offs[k] -= strides[k][d] * (out[d] - 1);
      idx[d] = 0;
    }
  }
}

}  // namespace driftless::ops::detail

// Host helpers of the ops' CUDA bodies: what the launchers of engine/ops/cuda/*.h take.
namespace driftless::ops::gpu {

// A fresh contiguous cuda tensor.
inline Tensor empty_cuda(const Shape& shape, DType dtype) {
  return Tensor::empty(shape, dtype, Device::cuda);
}

// The kernels' accumulation dtype: f64 for f64, f32 for f32 and bf16.
inline DType acc_dtype(DType dtype) {
  return dtype == DType::f64 ? DType::f64 : DType::f32;
}

inline Layout layout_of(const char* op, const Shape& shape) {
  DL_CHECK(shape.size() <= size_t(kMaxDims), op,
           "cuda kernels take at most " << kMaxDims << " dims, got " << shape_str(shape));
  Layout l;
  l.rank = int(shape.size());
  for (size_t d = 0; d < shape.size(); ++d) l.shape[d] = shape[d];
  return l;
}

// dx_add, another gradient of x that a fused backward adds to dx before its rounding, is
// undefined or contiguous of x's dtype and size.
inline void check_dx_add(const char* op, const Tensor& dx_add, const Tensor& x) {
  DL_CHECK(!dx_add.defined() || (dx_add.is_contiguous() && dx_add.dtype() == x.dtype() &&
                                 dx_add.numel() == x.numel()),
           op, "the gradient added to dx must be contiguous, of x's dtype and size");
}

// Strides that read x as if broadcast to `out`, and whether they are out's row-major ones.
inline std::pair<Strides, bool> read_strides(const Tensor& x, const Shape& out) {
  Shape st = detail::broadcast_strides(x.shape(), x.strides(), out);
  Shape dense = contiguous_strides(out);
  bool is_dense = true;
  for (size_t d = 0; d < out.size(); ++d)
    if (out[d] != 1 && st[d] != dense[d]) is_dense = false;
  Strides s;
  for (size_t d = 0; d < st.size(); ++d) s.v[d] = st[d];
  return {s, is_dense};
}

}  // namespace driftless::ops::gpu
