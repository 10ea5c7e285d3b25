// Seeded dropout: element i (row-major) is kept when random::uniform01(seed, i) >= p, so
// the mask depends only on (seed, index) and is the same on every machine and device. The
// backward regenerates the mask from the seed instead of saving it. The CUDA body
// (engine/ops/cuda/elementwise.cu) draws with the same inline hash (random.h).
#include <vector>

#include "engine/core/random.h"
#include "engine/ops/cuda/backend.h"
#include "engine/ops/op_utils.h"
#include "engine/ops/ops.h"

namespace driftless::ops {

using autograd::Context;

namespace {

// out[i] = x[i] * keep(i) / (1 - p), x read through its strides, out contiguous.
Tensor apply_mask(const Tensor& x, double p, uint64_t seed) {
  if (x.device() == Device::cuda) return gpu::dropout(x, p, seed);
  Tensor out = Tensor::empty(x.shape(), x.dtype());
  const double keep_scale = p < 1 ? 1.0 / (1.0 - p) : 0.0;
  detail::dispatch_float("dropout", x.dtype(), [&](auto z) {
    using T = decltype(z);
    const T* px = x.data<T>();
    T* po = out.data<T>();
    detail::for_each_broadcast<1>(x.shape(), std::array<Shape, 1>{x.strides()},
                                  [&](int64_t i, const auto& o) {
                                    const bool keep = random::uniform01(seed, uint64_t(i)) >= p;
                                    po[i] = keep ? T(double(px[o[0]]) * keep_scale) : T(0);
                                  });
  });
  return out;
}

}  // namespace

Tensor dropout(const Tensor& x, double p, uint64_t seed, bool training) {
  const char* op = "dropout";
  detail::require_float(op, x, "x");
  DL_CHECK(p >= 0 && p <= 1, op, "p must be in [0, 1], got " << p);
  detail::device_of(op, {x});
  if (!training || p == 0) return x;
  Tensor out = apply_mask(x, p, seed);
  return autograd::record(op, {x}, out, Context(),
                          [p, seed](Context&, const std::vector<Tensor>& g) {
                            return std::vector<Tensor>{apply_mask(g[0], p, seed)};
                          });
}

}  // namespace driftless::ops
