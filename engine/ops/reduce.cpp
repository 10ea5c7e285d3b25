// Reductions over one dim (sum, mean) and over everything (sum_all). Accumulation is in
// double on cpu; on cuda in fp32 (f64 for f64) in a fixed order (engine/ops/cuda/reduce.cu).
#include "engine/ops/cuda/reduce.h"

#include <vector>

#include "engine/ops/cuda/backend.h"
#include "engine/ops/op_utils.h"
#include "engine/ops/ops.h"

namespace driftless::ops {

using autograd::Context;

// ---- the CUDA body: host side of the kernels of cuda/reduce.cu ----
namespace gpu {

Tensor sum_to(const Tensor& x, const Shape& shape, double factor) {
  const char* op = "sum_to";
  Tensor out = empty_cuda(shape, x.dtype());
  if (out.numel() == 0) return out;
  const size_t rank = x.shape().size(), lead = rank - shape.size();
  // Split x's dims into kept (size equal in shape) and reduced (broadcast) ones, dropping
  // size-1 dims, which move nothing.
  ReduceLayout L;
  Shape kept_shape, kept_st, red_shape, red_st;
  for (size_t d = 0; d < rank; ++d) {
    const int64_t n = x.shape()[d];
    if (n == 1) continue;
    const bool reduced = d < lead || shape[d - lead] == 1;
    (reduced ? red_shape : kept_shape).push_back(n);
    (reduced ? red_st : kept_st).push_back(x.strides()[d]);
  }
  for (int64_t n : red_shape) L.n_red *= n;
  for (int64_t n : kept_shape) L.n_out *= n;
  if (L.n_red == 0) {
    out.zero_();
    return out;
  }
  if (L.n_out == 1) {
    // Everything reduces to one value: the two-pass full reduction over a dense copy.
    Tensor xc = x.contiguous();
    const int parts = sum_all_parts(xc.numel());
    Tensor scratch = Tensor::empty({parts}, acc_dtype(x.dtype()), Device::cuda);
    launch_sum_all(x.dtype(), xc.raw_data(), xc.numel(), false, false, scratch.raw_data(),
                   out.raw_data(), out.dtype(), factor);
    return out;
  }
  DL_CHECK(kept_shape.size() <= size_t(kMaxDims) && red_shape.size() <= size_t(kMaxDims), op,
           "too many dims in " << shape_str(x.shape()));
  L.kept_rank = int(kept_shape.size());
  L.red_rank = int(red_shape.size());
  for (int d = 0; d < L.kept_rank; ++d) {
    L.kept_shape[d] = kept_shape[size_t(d)];
    L.kept_strides[d] = kept_st[size_t(d)];
  }
  for (int d = 0; d < L.red_rank; ++d) {
    L.red_shape[d] = red_shape[size_t(d)];
    L.red_strides[d] = red_st[size_t(d)];
  }
  const int64_t chunks = reduce_chunks(L);
  Tensor scratch = chunks > 1 ? empty_cuda({chunks * L.n_out}, acc_dtype(x.dtype())) : Tensor();
  launch_reduce(x.dtype(), x.raw_data(), L, out.raw_data(), factor,
                scratch.defined() ? scratch.raw_data() : nullptr);
  return out;
}

}  // namespace gpu

namespace {

// sum over dim d of x, times factor; output keeps dim d with size 1.
Tensor reduce_dim(const char* op, const Tensor& x_in, int64_t d, double factor) {
  Shape out_shape = x_in.shape();
  out_shape[d] = 1;
  if (x_in.device() == Device::cuda) return gpu::sum_to(x_in, out_shape, factor);
  Tensor x = x_in.contiguous();
  detail::Dims3 s = detail::dims3(x.shape(), d);
  Tensor out = Tensor::empty(out_shape, x.dtype());
  detail::dispatch_float(op, x.dtype(), [&](auto z) {
    using T = decltype(z);
    const T* px = x.data<T>();
    T* po = out.data<T>();
    std::vector<double> acc(size_t(s.inner));
    for (int64_t o = 0; o < s.outer; ++o) {
      std::fill(acc.begin(), acc.end(), 0.0);
      for (int64_t j = 0; j < s.n; ++j) {
        const T* row = px + (o * s.n + j) * s.inner;
        for (int64_t i = 0; i < s.inner; ++i) acc[size_t(i)] += double(row[i]);
      }
      for (int64_t i = 0; i < s.inner; ++i) po[o * s.inner + i] = T(acc[size_t(i)] * factor);
    }
  });
  return out;
}

Tensor reduce_op(const char* op, const Tensor& x, int64_t dim, bool keepdim, bool is_mean) {
  detail::require_float(op, x, "x");
  detail::device_of(op, {x});
  DL_CHECK(x.dim() > 0, op, "cannot reduce a zero-dim tensor over dim " << dim);
  const int64_t d = normalize_dim(dim, x.dim(), op);
  const int64_t n = x.size(d);
  DL_CHECK(!is_mean || n > 0, op, "mean over an empty dim " << d << " of " << shape_str(x.shape()));
  const double factor = is_mean ? 1.0 / double(n) : 1.0;
  Tensor out = reduce_dim(op, x, d, factor);
  if (!keepdim) out = out.squeeze(d);
  Shape sx = x.shape();
  return autograd::record(op, {x}, out, Context(),
                          [sx, d, keepdim, factor](Context&, const std::vector<Tensor>& g) {
                            Tensor gk = keepdim ? g[0] : g[0].unsqueeze(d);
                            Tensor r = broadcast_to(gk, sx);
                            return std::vector<Tensor>{factor == 1.0 ? r : scale(r, factor)};
                          });
}

}  // namespace

Tensor sum(const Tensor& x, int64_t dim, bool keepdim) {
  return reduce_op("sum", x, dim, keepdim, false);
}

Tensor mean(const Tensor& x, int64_t dim, bool keepdim) {
  return reduce_op("mean", x, dim, keepdim, true);
}

Tensor sum_all(const Tensor& x) {
  const char* op = "sum_all";
  detail::require_float(op, x, "x");
  const Device dev = detail::device_of(op, {x});
  Tensor out;
  if (dev == Device::cuda)
    out = gpu::sum_to(x, {});
  else
    out = Tensor::empty({}, x.dtype());
  if (dev == Device::cpu)
    detail::dispatch_float(op, x.dtype(), [&](auto z) {
      using T = decltype(z);
      const T* px = x.data<T>();
      double acc = 0;
      detail::for_each_broadcast<1>(x.shape(), std::array<Shape, 1>{x.strides()},
                                    [&](int64_t, const auto& o) { acc += double(px[o[0]]); });
      *out.data<T>() = T(acc);
    });
  Shape sx = x.shape();
  return autograd::record(op, {x}, out, Context(), [sx](Context&, const std::vector<Tensor>& g) {
    return std::vector<Tensor>{broadcast_to(g[0], sx)};
  });
}

}  // namespace driftless::ops
