// Fused cross-entropy with a loss mask and SUM reduction (ARCHITECTURE.md data flow: "loss (sum
// over real tokens ...)"): one node; backward = (softmax - onehot) * mask * g, and the mask
// gets the per-row loss. The caller scales by 1 / tokens in the global batch. The CUDA body
// (engine/ops/cuda/softmax.cu) keeps the per-row lse in fp32 (f64 for f64) and sums the
// row losses in a fixed order.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "engine/ops/cuda/backend.h"
#include "engine/ops/cuda/reduce.h"
#include "engine/ops/cuda/softmax.h"
#include "engine/ops/op_utils.h"
#include "engine/ops/ops.h"

namespace driftless::ops {

using autograd::Context;

// ---- the CUDA body: host side of the kernels of cuda/softmax.cu ----
namespace gpu {

namespace {
// Rows of a (n, v) matrix whose elements are contiguous within a row: their distance.
int64_t row_stride(const char* op, const Tensor& m) {
  DL_CHECK(m.dim() == 2 && (m.size(1) <= 1 || m.strides()[1] == 1) && m.strides()[0] >= m.size(1),
           op,
           "expects a (rows, v) matrix with contiguous rows, got shape "
               << shape_str(m.shape()) << " strides " << shape_str(m.strides()));
  return std::max<int64_t>(m.strides()[0], m.size(1));
}

// {loss, lse}, and dlogits when go is defined (cross_entropy_forward_backward).
std::vector<Tensor> cross_entropy_rows(const Tensor& logits, const Tensor& targets,
                                       const Tensor& mask, const Tensor& go, DType grad_dtype,
                                       const Tensor& into = Tensor(),
                                       const Tensor& row_loss_into = Tensor()) {
  const int64_t n = logits.size(0), v = logits.size(1), ld = row_stride("cross_entropy", logits);
  const DType acc = acc_dtype(logits.dtype());
  Tensor lse = empty_cuda({n}, acc);
  if (row_loss_into.defined())
    DL_CHECK(row_loss_into.device() == Device::cuda && row_loss_into.dtype() == acc &&
                 row_loss_into.shape() == Shape{n} && row_loss_into.is_contiguous(),
             "cross_entropy",
             "row losses must go into contiguous " << dtype_name(acc) << " [" << n << "]");
  Tensor row_loss = row_loss_into.defined() ? row_loss_into : empty_cuda({n}, acc);
  Tensor loss = row_loss_into.defined() ? Tensor() : empty_cuda({}, logits.dtype());
  Tensor g, dlogits;
  if (go.defined()) {
    g = go.to(Device::cuda, logits.dtype()).contiguous();
    // dlogits in the logits' row layout (a padded ld keeps the GEMMs that read it aligned).
    if (into.defined()) {
      DL_CHECK(into.device() == Device::cuda && into.dtype() == grad_dtype &&
                   into.shape() == logits.shape() && into.strides()[1] == 1 &&
                   (n <= 1 || into.strides()[0] == ld),
               "cross_entropy",
               "dlogits must go into " << shape_str(logits.shape()) << " " << dtype_name(grad_dtype)
                                       << " with the logits' row stride " << ld);
      dlogits = into;
    } else {
      dlogits = empty_cuda({n, ld}, grad_dtype).narrow(1, 0, v);
    }
  }
  if (n == 0) {
    if (loss.defined()) loss.zero_();
    return {loss, lse, dlogits};
  }
  launch_cross_entropy_forward(logits.dtype(), logits.raw_data(), targets.data<int64_t>(),
                               mask.defined() ? mask.raw_data() : nullptr, lse.raw_data(),
                               row_loss.raw_data(), n, v, ld, g.defined() ? g.raw_data() : nullptr,
                               dlogits.defined() ? dlogits.raw_data() : nullptr, grad_dtype);
  if (!loss.defined()) return {loss, lse, dlogits};  // the caller sums the row losses
  const int parts = sum_all_parts(n);
  Tensor scratch = empty_cuda({parts}, acc);
  launch_sum_all(acc, row_loss.raw_data(), n, false, false, scratch.raw_data(), loss.raw_data(),
                 loss.dtype(), 1.0);
  return {loss, lse, dlogits};
}
}  // namespace

std::vector<Tensor> cross_entropy_forward(const Tensor& logits, const Tensor& targets,
                                          const Tensor& mask, const Tensor& row_loss_into) {
  std::vector<Tensor> r =
      cross_entropy_rows(logits, targets, mask, Tensor(), logits.dtype(), Tensor(), row_loss_into);
  return {r[0], r[1]};
}

std::vector<Tensor> cross_entropy_forward_backward(const Tensor& go, const Tensor& logits,
                                                   const Tensor& targets, const Tensor& mask,
                                                   std::optional<DType> grad_dtype,
                                                   const Tensor& into,
                                                   const Tensor& row_loss_into) {
  std::vector<Tensor> r = cross_entropy_rows(
      logits, targets, mask, go, grad_dtype.value_or(logits.dtype()), into, row_loss_into);
  return {r[0], r[2]};
}

std::vector<Tensor> cross_entropy_backward(const Tensor& go, const Tensor& logits,
                                           const Tensor& lse, const Tensor& targets,
                                           const Tensor& mask, bool want_mask,
                                           std::optional<DType> grad_dtype) {
  const int64_t n = logits.size(0), v = logits.size(1), ld = row_stride("cross_entropy", logits);
  const DType gdt = grad_dtype.value_or(logits.dtype());
  Tensor g = go.to(Device::cuda, logits.dtype()).contiguous();
  // dlogits in the logits' row layout (a padded ld keeps the GEMMs that read it aligned).
  Tensor dlogits = empty_cuda({n, ld}, gdt).narrow(1, 0, v);
  Tensor dmask = want_mask ? empty_cuda({n}, logits.dtype()) : Tensor();
  launch_cross_entropy_backward(logits.dtype(), g.raw_data(), logits.raw_data(),
                                targets.data<int64_t>(), mask.defined() ? mask.raw_data() : nullptr,
                                lse.raw_data(), dlogits.raw_data(), gdt,
                                dmask.defined() ? dmask.raw_data() : nullptr, n, v, ld);
  return {dlogits, dmask};
}

}  // namespace gpu

namespace {

// Per-row target indices as int64, validated against [0, v).
std::vector<int64_t> read_targets(const Tensor& targets, int64_t v) {
  std::vector<int64_t> t = targets.to_vector<int64_t>();
  for (size_t i = 0; i < t.size(); ++i)
    DL_CHECK(t[i] >= 0 && t[i] < v, "cross_entropy",
             "target " << t[i] << " at row " << i << " is out of range [0, " << v << ")");
  return t;
}

// The cuda node: targets as i64 and the mask stay on the device; the backward reads the
// upstream gradient there too (no host round trip).
Tensor cross_entropy_cuda(const Tensor& logits_in, const Tensor& targets_in,
                          const Tensor& mask_in) {
  Tensor logits = logits_in.contiguous();
  Tensor targets = targets_in.to(Device::cuda, DType::i64).contiguous();
  Tensor mask = mask_in.defined() ? mask_in.contiguous() : Tensor();
  std::vector<Tensor> r = gpu::cross_entropy_forward(logits, targets, mask);
  Context ctx;
  ctx.save_for_backward({logits, r[1], targets, mask});
  const bool want_mask = mask_in.defined();
  return autograd::record("cross_entropy", {logits_in, targets_in, mask_in}, r[0], std::move(ctx),
                          [want_mask](Context& c, const std::vector<Tensor>& g) {
                            const auto& s = c.saved_tensors();
                            std::vector<Tensor> d = gpu::cross_entropy_backward(
                                g[0], s[0], s[1], s[2], s[3], want_mask);
                            return std::vector<Tensor>{d[0], Tensor(), d[1]};
                          });
}

}  // namespace

Tensor cross_entropy(const Tensor& logits_in, const Tensor& targets, const Tensor& mask_in) {
  const char* op = "cross_entropy";
  detail::require_float(op, logits_in, "logits");
  detail::require_int(op, targets, "targets");
  DL_CHECK(logits_in.dim() == 2, op, "logits must be (N, V), got " << shape_str(logits_in.shape()));
  const int64_t n = logits_in.size(0), v = logits_in.size(1);
  DL_CHECK(targets.shape() == Shape{n}, op,
           "targets must have shape [" << n << "] for logits " << shape_str(logits_in.shape())
                                       << ", got " << shape_str(targets.shape()));
  if (mask_in.defined()) {
    detail::require_same_dtype(op, logits_in, "logits", mask_in, "loss_mask");
    DL_CHECK(mask_in.shape() == Shape{n}, op,
             "loss_mask must have shape [" << n << "] for logits " << shape_str(logits_in.shape())
                                           << ", got " << shape_str(mask_in.shape()));
  }
  const Device dev = detail::device_of(op, {logits_in, targets, mask_in});
  DL_CHECK(v > 0 || n == 0, op, "logits " << shape_str(logits_in.shape()) << " have no classes");
  std::vector<int64_t> t = read_targets(targets, v);
  if (dev == Device::cuda) return cross_entropy_cuda(logits_in, targets, mask_in);
  Tensor logits = logits_in.contiguous();
  std::vector<double> mask =
      mask_in.defined() ? mask_in.to_vector<double>() : std::vector<double>(size_t(n), 1.0);
  Tensor lse = Tensor::empty({n}, DType::f64);  // per-row log-sum-exp, kept in double
  Tensor out = Tensor::empty({}, logits.dtype());
  detail::dispatch_float(op, logits.dtype(), [&](auto z) {
    using T = decltype(z);
    const T* px = logits.data<T>();
    double* pl = lse.data<double>();
    double total = 0;
    for (int64_t r = 0; r < n; ++r) {
      const T* row = px + r * v;
      double m = -std::numeric_limits<double>::infinity();
      for (int64_t j = 0; j < v; ++j) m = std::max(m, double(row[j]));
      double s = 0;
      for (int64_t j = 0; j < v; ++j) s += std::exp(double(row[j]) - m);
      pl[r] = m + std::log(s);
      if (mask[size_t(r)] != 0) total += mask[size_t(r)] * (pl[r] - double(row[t[size_t(r)]]));
    }
    *out.data<T>() = T(total);
  });
  Context ctx;
  ctx.save_for_backward({logits, lse});
  ctx.data() = std::make_pair(std::move(t), std::move(mask));
  const bool want_mask = mask_in.defined();
  return autograd::record(
      op, {logits_in, targets, mask_in}, out, std::move(ctx),
      [want_mask](Context& c, const std::vector<Tensor>& g) {
        const Tensor& logits = c.saved_tensors()[0];
        const double* pl = c.saved_tensors()[1].data<double>();
        auto& [t, mask] =
            std::any_cast<std::pair<std::vector<int64_t>, std::vector<double>>&>(c.data());
        const double go = g[0].item();
        const int64_t n = logits.size(0), v = logits.size(1);
        Tensor dlogits = Tensor::empty(logits.shape(), logits.dtype());
        Tensor dmask = want_mask ? Tensor::empty({n}, logits.dtype()) : Tensor();
        detail::dispatch_float("cross_entropy", logits.dtype(), [&](auto z) {
          using T = decltype(z);
          const T* px = logits.data<T>();
          T* pd = dlogits.data<T>();
          for (int64_t r = 0; r < n; ++r) {
            const double w = go * mask[size_t(r)];
            const T* row = px + r * v;
            for (int64_t j = 0; j < v; ++j) pd[r * v + j] = T(w * std::exp(double(row[j]) - pl[r]));
            pd[r * v + t[size_t(r)]] -= T(w);
            if (want_mask) dmask.data<T>()[r] = T(go * (pl[r] - double(row[t[size_t(r)]])));
          }
        });
        return std::vector<Tensor>{dlogits, Tensor(), dmask};
      });
}

}  // namespace driftless::ops
