// Differentiable shape ops: concat (a copy), split (views, one multi-output node), and the
// recorded versions of the Tensor view methods (narrow, reshape, transpose, permute) plus
// contiguous. Backwards are written in terms of views and concat. All work on both
// devices: views share storage, and copies go through Tensor::copy_ (engine/core).
#include <numeric>
#include <vector>

#include "engine/ops/op_utils.h"
#include "engine/ops/ops.h"

namespace driftless::ops {

using autograd::Context;

Tensor concat(const std::vector<Tensor>& tensors, int64_t dim) {
  const char* op = "concat";
  DL_CHECK(!tensors.empty(), op, "needs at least one tensor");
  const Tensor& first = tensors[0];
  detail::require_defined(op, first, "tensor 0");
  DL_CHECK(first.dim() > 0, op, "cannot concatenate zero-dim tensors");
  const int64_t d = normalize_dim(dim, first.dim(), op);
  Shape out_shape = first.shape();
  out_shape[d] = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    detail::require_defined(op, t, "a tensor");
    detail::require_same_dtype(op, first, "tensor 0", t, ("tensor " + std::to_string(i)).c_str());
    detail::device_of(op, {first, t});
    bool ok = t.dim() == first.dim();
    for (int64_t k = 0; ok && k < t.dim(); ++k) ok = k == d || t.size(k) == first.size(k);
    DL_CHECK(ok, op,
             "tensor " << i << " has shape " << shape_str(t.shape()) << ", tensor 0 has "
                       << shape_str(first.shape()) << "; only dim " << d << " may differ");
    out_shape[d] += t.size(d);
  }
  Tensor out = Tensor::empty(out_shape, first.dtype(), first.device());
  std::vector<int64_t> sizes;
  int64_t off = 0;
  for (const Tensor& t : tensors) {
    out.narrow(d, off, t.size(d)).copy_(t);
    off += t.size(d);
    sizes.push_back(t.size(d));
  }
  return autograd::record(op, tensors, out, Context(),
                          [d, sizes](Context&, const std::vector<Tensor>& g) {
                            std::vector<Tensor> r;
                            int64_t off = 0;
                            for (int64_t s : sizes) {
                              r.push_back(g[0].narrow(d, off, s));
                              off += s;
                            }
                            return r;
                          });
}

std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int64_t dim) {
  const char* op = "split";
  detail::require_defined(op, x, "x");
  detail::device_of(op, {x});
  DL_CHECK(x.dim() > 0, op, "cannot split a zero-dim tensor");
  const int64_t d = normalize_dim(dim, x.dim(), op);
  int64_t total = 0;
  for (int64_t s : sizes) {
    DL_CHECK(s >= 0, op, "negative size " << s << " in split of " << shape_str(x.shape()));
    total += s;
  }
  DL_CHECK(total == x.size(d), op,
           "sizes sum to " << total << " but dim " << d << " of " << shape_str(x.shape()) << " has "
                           << x.size(d));
  std::vector<Tensor> outs;
  int64_t off = 0;
  for (int64_t s : sizes) {
    outs.push_back(x.narrow(d, off, s));
    off += s;
  }
  // Gradients that are adjacent blocks of one buffer (the fast attention backward writes dq,
  // dk and dv so, laid out like the QKV product that was split) are that buffer: no copy.
  return autograd::record(op, {x}, outs, Context(), [d](Context&, const std::vector<Tensor>& g) {
    Tensor whole = Tensor::joined(g, d);
    return std::vector<Tensor>{whole.defined() ? whole : concat(g, d)};
  });
}

Tensor narrow(const Tensor& x, int64_t dim, int64_t start, int64_t length) {
  const char* op = "narrow";
  detail::require_defined(op, x, "x");
  detail::device_of(op, {x});
  DL_CHECK(x.dim() > 0, op, "cannot narrow a zero-dim tensor");
  const int64_t d = normalize_dim(dim, x.dim(), op);
  Tensor out = x.narrow(d, start, length);
  Shape sx = x.shape();
  DType dt = x.dtype();
  Device dev = x.device();
  return autograd::record(op, {x}, out, Context(),
                          [sx, dt, dev, d, start, length](Context&, const std::vector<Tensor>& g) {
                            Tensor dx = Tensor::zeros(sx, dt, dev);
                            dx.narrow(d, start, length).copy_(g[0]);
                            return std::vector<Tensor>{dx};
                          });
}

Tensor reshape(const Tensor& x, const Shape& shape) {
  detail::require_defined("reshape", x, "x");
  detail::device_of("reshape", {x});
  Tensor out = x.reshape(shape);
  Shape sx = x.shape();
  return autograd::record("reshape", {x}, out, Context(),
                          [sx](Context&, const std::vector<Tensor>& g) {
                            return std::vector<Tensor>{g[0].reshape(sx)};
                          });
}

Tensor transpose(const Tensor& x, int64_t d0, int64_t d1) {
  detail::require_defined("transpose", x, "x");
  detail::device_of("transpose", {x});
  Tensor out = x.transpose(d0, d1);
  return autograd::record("transpose", {x}, out, Context(),
                          [d0, d1](Context&, const std::vector<Tensor>& g) {
                            return std::vector<Tensor>{g[0].transpose(d0, d1)};
                          });
}

Tensor permute(const Tensor& x, const std::vector<int64_t>& dims) {
  detail::require_defined("permute", x, "x");
  detail::device_of("permute", {x});
  Tensor out = x.permute(dims);  // validates dims
  std::vector<int64_t> inverse(dims.size());
  for (size_t i = 0; i < dims.size(); ++i)
    inverse[size_t(normalize_dim(dims[i], x.dim(), "permute"))] = int64_t(i);
  return autograd::record("permute", {x}, out, Context(),
                          [inverse](Context&, const std::vector<Tensor>& g) {
                            return std::vector<Tensor>{g[0].permute(inverse)};
                          });
}

Tensor contiguous(const Tensor& x) {
  detail::require_defined("contiguous", x, "x");
  detail::device_of("contiguous", {x});
  if (x.is_contiguous()) return x;
  return autograd::record(
      "contiguous", {x}, x.clone(), Context(),
      [](Context&, const std::vector<Tensor>& g) { return std::vector<Tensor>{g[0]}; });
}

}  // namespace driftless::ops
