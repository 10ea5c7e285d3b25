// Seeded dropout: element c of a row with global id g is kept when random::uniform01(seed,
// g * n + c) >= p (n elements a row), so the mask depends only on (seed, row id, column)
// and is the same on every machine, device and batch layout. The backward regenerates the
// mask from the seed instead of saving it. The CUDA body (engine/ops/cuda/elementwise.cu)
// draws with the same inline hash (random.h).
#include <vector>

#include "engine/core/random.h"
#include "engine/ops/op_utils.h"
#include "engine/ops/ops.h"

namespace driftless::ops {

using autograd::Context;

// ---- the CUDA body: host side of the kernels of cuda/elementwise.cu ----
namespace gpu {

namespace {

Tensor dropout(const Tensor& x, double p, uint64_t seed, const Tensor& row_ids, int64_t row_len) {
  DL_CHECK(
      row_ids.device() == Device::cuda && row_ids.dtype() == DType::i64 && row_ids.is_contiguous(),
      "dropout", "row ids must be contiguous i64 on the GPU");
  Tensor out = empty_cuda(x.shape(), x.dtype());
  auto [sx, dx] = read_strides(x, x.shape());
  const double keep_scale = p < 1 ? 1.0 / (1.0 - p) : 0.0;
  launch_dropout(x.dtype(), layout_of("dropout", x.shape()), dx, x.raw_data(), sx, out.raw_data(),
                 out.numel(), row_ids.data<int64_t>(), row_len, keep_scale, p, seed);
  return out;
}

}  // namespace

}  // namespace gpu

namespace {

// out[r, c] = x[r, c] * keep(ids[r] * n + c) / (1 - p), x read through its strides, out
// contiguous; ids is i64 (R) on x's device.
Tensor apply_mask(const Tensor& x, double p, uint64_t seed, const Tensor& ids, int64_t n) {
  if (x.device() == Device::cuda) return gpu::dropout(x, p, seed, ids, n);
  Tensor out = Tensor::empty(x.shape(), x.dtype());
  const double keep_scale = p < 1 ? 1.0 / (1.0 - p) : 0.0;
  const int64_t* id = ids.data<int64_t>();
  detail::dispatch_float("dropout", x.dtype(), [&](auto z) {
    using T = decltype(z);
    const T* px = x.data<T>();
    T* po = out.data<T>();
    detail::for_each_broadcast<1>(
        x.shape(), std::array<Shape, 1>{x.strides()}, [&](int64_t i, const auto& o) {
          const uint64_t counter = uint64_t(id[i / n]) * uint64_t(n) + uint64_t(i % n);
          const bool keep = random::uniform01(seed, counter) >= p;
          po[i] = keep ? T(double(px[o[0]]) * keep_scale) : T(0);
        });
  });
  return out;
}

}  // namespace

Tensor dropout(const Tensor& x, double p, uint64_t seed, const std::vector<DropoutRows>& rows,
               bool training) {
  const char* op = "dropout";
  detail::require_float(op, x, "x");
  DL_CHECK(p >= 0 && p <= 1, op, "p must be in [0, 1], got " << p);
  const Device device = detail::device_of(op, {x});
  const int64_t R = x.dim() == 0 ? 1 : x.size(0);
  int64_t covered = 0;
  for (const DropoutRows& run : rows) {
    DL_CHECK(
        run.first >= 0 && run.rows >= 0, op,
        "row runs need first >= 0 and rows >= 0, got first " << run.first << " rows " << run.rows);
    covered += run.rows;
  }
  DL_CHECK(covered == R, op,
           "row runs cover " << covered << " rows, x " << shape_str(x.shape()) << " has " << R);
  if (!training || p == 0 || x.numel() == 0) return x;
  const int64_t n = x.numel() / R;
  std::vector<int64_t> ids;
  ids.reserve(size_t(R));
  for (const DropoutRows& run : rows)
    for (int64_t k = 0; k < run.rows; ++k) ids.push_back(run.first + k);
  Tensor dev_ids = Tensor::from_vector(ids);
  if (device == Device::cuda) dev_ids = dev_ids.to(Device::cuda);
  Tensor out = apply_mask(x, p, seed, dev_ids, n);
  return autograd::record(op, {x}, out, Context(),
                          [p, seed, dev_ids, n](Context&, const std::vector<Tensor>& g) {
                            return std::vector<Tensor>{apply_mask(g[0], p, seed, dev_ids, n)};
                          });
}

Tensor dropout(const Tensor& x, double p, uint64_t seed, bool training) {
  const int64_t R = x.dim() == 0 ? 1 : x.size(0);
  return dropout(x, p, seed, {DropoutRows{0, R}}, training);
}

}  // namespace driftless::ops
