// Elementwise ops with numpy broadcasting (add, sub, mul), scalar ops, and the
// broadcast_to / sum_to pair that every broadcasting backward reduces through.
// Kernels read strided inputs directly; outputs are contiguous. CUDA bodies in
// engine/ops/cuda/elementwise.cu and reduce.cu.
#include <vector>

#include "engine/core/device_ops.h"
#include "engine/ops/cuda/backend.h"
#include "engine/ops/op_utils.h"
#include "engine/ops/ops.h"

namespace driftless::ops {

// ---- the CUDA body: host side of the kernels of cuda/elementwise.cu ----
namespace gpu {

Tensor binary(Binary kind, const Tensor& a, const Tensor& b, const Shape& out_shape) {
  Tensor out = empty_cuda(out_shape, a.dtype());
  auto [sa, da] = read_strides(a, out_shape);
  auto [sb, db] = read_strides(b, out_shape);
  // Two dense, aligned operands of out's shape (GPT-2's token + position embeddings): the
  // 16-byte adds of Tensor::plus, the same per-element arithmetic, faster than the
  // element-wise kernel (BENCHMARKS.md).
  if (kind == Binary::add && da && db && cuda::add_units(out, a, b)) return out;
  const BinaryKind k = kind == Binary::add   ? BinaryKind::add
                       : kind == Binary::sub ? BinaryKind::sub
                                             : BinaryKind::mul;
  launch_binary(k, a.dtype(), layout_of("elementwise", out_shape), da && db, a.raw_data(), sa,
                b.raw_data(), sb, out.raw_data(), out.numel());
  return out;
}

Tensor unary(Unary kind, const Tensor& x, const Shape& out_shape, double s) {
  Tensor out = empty_cuda(out_shape, x.dtype());
  auto [sx, dx] = read_strides(x, out_shape);
  UnaryKind k = UnaryKind::copy;
  switch (kind) {
    case Unary::copy:
      k = UnaryKind::copy;
      break;
    case Unary::scale:
      k = UnaryKind::scale;
      break;
    case Unary::add_scalar:
      k = UnaryKind::add_scalar;
      break;
    case Unary::neg:
      k = UnaryKind::neg;
      break;
    case Unary::gelu:
      k = UnaryKind::gelu;
      break;
  }
  launch_unary(k, x.dtype(), layout_of("elementwise", out_shape), dx, x.raw_data(), sx,
               out.raw_data(), out.numel(), s);
  return out;
}

void scaled_into(const Tensor& src, const Tensor& scale, const Tensor& dst) {
  DL_CHECK(src.dtype() == DType::f32 && src.is_contiguous() && dst.is_contiguous() &&
               (dst.dtype() == DType::f32 || dst.dtype() == DType::bf16) &&
               dst.numel() == src.numel() && scale.numel() == 1 && scale.dtype() == DType::f32,
           "scaled_into",
           "expected contiguous f32 src, f32/bf16 dst of its size and a one-element f32 scale, got "
               << dtype_name(src.dtype()) << " " << shape_str(src.shape()) << ", "
               << dtype_name(dst.dtype()) << " " << shape_str(dst.shape()) << ", "
               << dtype_name(scale.dtype()) << " " << shape_str(scale.shape()));
  launch_scaled_f32(src.data<float>(), scale.contiguous().data<float>(), dst.raw_data(),
                    dst.dtype(), src.numel());
}

}  // namespace gpu

using autograd::Context;
using detail::broadcast_strides;
using detail::dispatch_float;
using detail::for_each_broadcast;

namespace {

template <class Fn>
Tensor binary_kernel(const char* op, gpu::Binary kind, const Tensor& a, const Tensor& b, Fn fn) {
  detail::require_float(op, a, "a");
  detail::require_float(op, b, "b");
  detail::require_same_dtype(op, a, "a", b, "b");
  const Device dev = detail::device_of(op, {a, b});
  Shape out_shape = detail::broadcast_shape(op, a.shape(), b.shape());
  if (dev == Device::cuda) return gpu::binary(kind, a, b, out_shape);
  Tensor out = Tensor::empty(out_shape, a.dtype());
  dispatch_float(op, a.dtype(), [&](auto z) {
    using T = decltype(z);
    const T* pa = a.data<T>();
    const T* pb = b.data<T>();
    T* po = out.data<T>();
    std::array<Shape, 2> st{broadcast_strides(a.shape(), a.strides(), out_shape),
                            broadcast_strides(b.shape(), b.strides(), out_shape)};
    for_each_broadcast<2>(out_shape, st,
                          [&](int64_t i, const auto& o) { po[i] = fn(pa[o[0]], pb[o[1]]); });
  });
  return out;
}

template <class Fn>
Tensor unary_kernel(const char* op, gpu::Unary kind, double s, const Tensor& x, Fn fn) {
  detail::require_float(op, x, "x");
  if (detail::device_of(op, {x}) == Device::cuda) return gpu::unary(kind, x, x.shape(), s);
  Tensor out = Tensor::empty(x.shape(), x.dtype());
  dispatch_float(op, x.dtype(), [&](auto z) {
    using T = decltype(z);
    const T* px = x.data<T>();
    T* po = out.data<T>();
    for_each_broadcast<1>(x.shape(), std::array<Shape, 1>{x.strides()},
                          [&](int64_t i, const auto& o) { po[i] = fn(px[o[0]]); });
  });
  return out;
}

}  // namespace

Tensor add(const Tensor& a, const Tensor& b) {
  Tensor out = binary_kernel("add", gpu::Binary::add, a, b, [](auto x, auto y) { return x + y; });
  Shape sa = a.shape(), sb = b.shape();
  return autograd::record("add", {a, b}, out, Context(),
                          [sa, sb](Context&, const std::vector<Tensor>& g) {
                            return std::vector<Tensor>{sum_to(g[0], sa), sum_to(g[0], sb)};
                          });
}

Tensor sub(const Tensor& a, const Tensor& b) {
  Tensor out = binary_kernel("sub", gpu::Binary::sub, a, b, [](auto x, auto y) { return x - y; });
  Shape sa = a.shape(), sb = b.shape();
  return autograd::record("sub", {a, b}, out, Context(),
                          [sa, sb](Context&, const std::vector<Tensor>& g) {
                            return std::vector<Tensor>{sum_to(g[0], sa), sum_to(neg(g[0]), sb)};
                          });
}

Tensor mul(const Tensor& a, const Tensor& b) {
  Tensor out = binary_kernel("mul", gpu::Binary::mul, a, b, [](auto x, auto y) { return x * y; });
  Context ctx;
  ctx.save_for_backward({a, b});
  return autograd::record("mul", {a, b}, out, std::move(ctx),
                          [](Context& c, const std::vector<Tensor>& g) {
                            const Tensor& sa = c.saved_tensors()[0];
                            const Tensor& sb = c.saved_tensors()[1];
                            return std::vector<Tensor>{sum_to(mul(g[0], sb), sa.shape()),
                                                       sum_to(mul(g[0], sa), sb.shape())};
                          });
}

Tensor scale(const Tensor& x, double s) {
  Tensor out =
      unary_kernel("scale", gpu::Unary::scale, s, x, [s](auto v) { return decltype(v)(v * s); });
  return autograd::record(
      "scale", {x}, out, Context(),
      [s](Context&, const std::vector<Tensor>& g) { return std::vector<Tensor>{scale(g[0], s)}; });
}

Tensor add_scalar(const Tensor& x, double s) {
  Tensor out = unary_kernel("add_scalar", gpu::Unary::add_scalar, s, x,
                            [s](auto v) { return decltype(v)(v + s); });
  return autograd::record(
      "add_scalar", {x}, out, Context(),
      [](Context&, const std::vector<Tensor>& g) { return std::vector<Tensor>{g[0]}; });
}

Tensor neg(const Tensor& x) {
  Tensor out = unary_kernel("neg", gpu::Unary::neg, 0, x, [](auto v) { return -v; });
  return autograd::record("neg", {x}, out, Context(), [](Context&, const std::vector<Tensor>& g) {
    return std::vector<Tensor>{neg(g[0])};
  });
}

Tensor broadcast_to(const Tensor& x, const Shape& shape) {
  const char* op = "broadcast_to";
  detail::require_float(op, x, "x");
  const Device dev = detail::device_of(op, {x});
  DL_CHECK(
      x.dim() <= int64_t(shape.size()) && detail::broadcast_shape(op, x.shape(), shape) == shape,
      op, "cannot broadcast " << shape_str(x.shape()) << " to " << shape_str(shape));
  Tensor out;
  if (dev == Device::cuda)
    out = gpu::unary(gpu::Unary::copy, x, shape);
  else
    out = Tensor::empty(shape, x.dtype());
  if (dev == Device::cpu)
    dispatch_float(op, x.dtype(), [&](auto z) {
      using T = decltype(z);
      const T* px = x.data<T>();
      T* po = out.data<T>();
      std::array<Shape, 1> st{broadcast_strides(x.shape(), x.strides(), shape)};
      for_each_broadcast<1>(shape, st, [&](int64_t i, const auto& o) { po[i] = px[o[0]]; });
    });
  Shape sx = x.shape();
  return autograd::record(op, {x}, out, Context(), [sx](Context&, const std::vector<Tensor>& g) {
    return std::vector<Tensor>{sum_to(g[0], sx)};
  });
}

Tensor sum_to(const Tensor& x, const Shape& shape) {
  const char* op = "sum_to";
  detail::require_float(op, x, "x");
  const Device dev = detail::device_of(op, {x});
  DL_CHECK(int64_t(shape.size()) <= x.dim() &&
               detail::broadcast_shape(op, shape, x.shape()) == x.shape(),
           op, "cannot sum " << shape_str(x.shape()) << " down to " << shape_str(shape));
  if (shape == x.shape()) return x;
  Tensor out;
  if (dev == Device::cuda)
    out = gpu::sum_to(x, shape);
  else
    out = Tensor::empty(shape, x.dtype());
  if (dev == Device::cpu)
    dispatch_float(op, x.dtype(), [&](auto z) {
      using T = decltype(z);
      std::vector<double> acc(size_t(shape_numel(shape)), 0.0);
      const T* px = x.data<T>();
      std::array<Shape, 2> st{x.strides(),
                              broadcast_strides(shape, contiguous_strides(shape), x.shape())};
      for_each_broadcast<2>(x.shape(), st,
                            [&](int64_t, const auto& o) { acc[size_t(o[1])] += px[o[0]]; });
      T* po = out.data<T>();
      for (size_t i = 0; i < acc.size(); ++i) po[i] = T(acc[i]);
    });
  Shape sx = x.shape();
  return autograd::record(op, {x}, out, Context(), [sx](Context&, const std::vector<Tensor>& g) {
    return std::vector<Tensor>{broadcast_to(g[0], sx)};
  });
}

}  // namespace driftless::ops
