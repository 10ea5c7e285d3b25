// Batched matrix product with optional transposes: Eigen maps on contiguous data on cpu,
// cuBLAS on cuda (engine/ops/cuda/gemm.cpp). A 2-D operand is broadcast over the other's
// batch dims; when b is the 2-D one and a is not transposed, the batch is folded into M so
// the product is one large GEMM (Linear).
#include <Eigen/Core>
#include <vector>

#include "engine/ops/cuda/backend.h"
#include "engine/ops/op_utils.h"
#include "engine/ops/ops.h"

namespace driftless::ops {

using autograd::Context;

namespace {

template <class T>
using RowMat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <class T>
using ConstMap = Eigen::Map<const RowMat<T>>;
template <class T>
using MutMap = Eigen::Map<RowMat<T>>;

// c = op(a) op(b) for one matrix; a is (ra, ca) and b is (rb, cb) as stored.
template <class T>
void gemm(const T* a, int64_t ra, int64_t ca, bool ta, const T* b, int64_t rb, int64_t cb, bool tb,
          T* c) {
  ConstMap<T> A(a, ra, ca);
  ConstMap<T> B(b, rb, cb);
  const int64_t m = ta ? ca : ra, n = tb ? rb : cb;
  MutMap<T> C(c, m, n);
  if (!ta && !tb) C.noalias() = A * B;
  if (ta && !tb) C.noalias() = A.transpose() * B;
  if (!ta && tb) C.noalias() = A * B.transpose();
  if (ta && tb) C.noalias() = A.transpose() * B.transpose();
}

Shape batch_of(const Tensor& t) {
  return Shape(t.shape().begin(), t.shape().end() - 2);
}

Tensor matmul_forward(const Tensor& a_in, const Tensor& b_in, bool ta, bool tb) {
  const char* op = "matmul";
  detail::require_float(op, a_in, "a");
  detail::require_float(op, b_in, "b");
  detail::require_same_dtype(op, a_in, "a", b_in, "b");
  DL_CHECK(a_in.dim() >= 2 && b_in.dim() >= 2, op,
           "operands must have at least 2 dims, got a " << shape_str(a_in.shape()) << " and b "
                                                        << shape_str(b_in.shape()));
  const Device dev = detail::device_of(op, {a_in, b_in});
  const int64_t ra = a_in.size(-2), ca = a_in.size(-1);
  const int64_t rb = b_in.size(-2), cb = b_in.size(-1);
  const int64_t m = ta ? ca : ra, k = ta ? ra : ca;
  const int64_t kb = tb ? cb : rb, n = tb ? rb : cb;
  DL_CHECK(k == kb, op,
           "inner dims differ: a " << shape_str(a_in.shape()) << (ta ? " (transposed)" : "")
                                   << " gives K = " << k << ", b " << shape_str(b_in.shape())
                                   << (tb ? " (transposed)" : "") << " gives K = " << kb);
  Shape ba = batch_of(a_in), bb = batch_of(b_in);
  DL_CHECK(ba == bb || ba.empty() || bb.empty(), op,
           "batch dims must be equal or one operand 2-D, got a "
               << shape_str(a_in.shape()) << " and b " << shape_str(b_in.shape()));
  Shape batch = ba.empty() ? bb : ba;
  Shape out_shape = batch;
  out_shape.push_back(m);
  out_shape.push_back(n);
  Tensor out = Tensor::empty(out_shape, a_in.dtype(), dev);
  if (out.numel() == 0) return out;
  Tensor a = a_in.contiguous(), b = b_in.contiguous();
  const int64_t nb = shape_numel(batch);
  if (dev == Device::cuda) {
    if (k == 0) {
      out.zero_();
    } else if (bb.empty() && !ta) {
      gpu::gemm(a.dtype(), a.raw_data(), nb * ra, ca, false, 0, b.raw_data(), rb, cb, tb, 0,
                out.raw_data(), 1);  // fold batch into M
    } else {
      gpu::gemm(a.dtype(), a.raw_data(), ra, ca, ta, ba.empty() ? 0 : ra * ca, b.raw_data(), rb, cb,
                tb, bb.empty() ? 0 : rb * cb, out.raw_data(), nb);
    }
    return out;
  }
  detail::dispatch_float(op, a.dtype(), [&](auto z) {
    using T = decltype(z);
    const T* pa = a.data<T>();
    const T* pb = b.data<T>();
    T* pc = out.data<T>();
    if (k == 0) {
      std::fill(pc, pc + out.numel(), T(0));
    } else if (bb.empty() && !ta) {
      gemm<T>(pa, nb * ra, ca, false, pb, rb, cb, tb, pc);  // fold batch into M
    } else {
      const int64_t sa = ba.empty() ? 0 : ra * ca, sb = bb.empty() ? 0 : rb * cb;
      for (int64_t i = 0; i < nb; ++i)
        gemm<T>(pa + i * sa, ra, ca, ta, pb + i * sb, rb, cb, tb, pc + i * m * n);
    }
  });
  return out;
}

}  // namespace

Tensor matmul(const Tensor& a, const Tensor& b, bool ta, bool tb) {
  Tensor out = matmul_forward(a, b, ta, tb);
  Context ctx;
  ctx.save_for_backward({a, b});
  return autograd::record(
      "matmul", {a, b}, out, std::move(ctx), [ta, tb](Context& c, const std::vector<Tensor>& gs) {
        const Tensor& a = c.saved_tensors()[0];
        const Tensor& b = c.saved_tensors()[1];
        const Tensor& g = gs[0];  // (B..., M, N)
        Tensor da, db;
        // C = op(A) op(B): dop(A) = dC op(B)^T, dop(B) = op(A)^T dC; then undo the op.
        if (!ta && !tb) {
          da = matmul(g, b, false, true);
          db = matmul(a, g, true, false);
        } else if (ta && !tb) {
          da = matmul(b, g, false, true);
          db = matmul(a, g, false, false);
        } else if (!ta && tb) {
          da = matmul(g, b, false, false);
          db = matmul(g, a, true, false);
        } else {
          da = matmul(b, g, true, true);
          db = matmul(g, a, true, true);
        }
        if (b.dim() == 2 && a.dim() > 2 && !ta) {
          // Fold the batch: dB = sum over batch of A_i^T G_i as one GEMM.
          Tensor a2 = a.reshape({-1, a.size(-1)}), g2 = g.reshape({-1, g.size(-1)});
          db = tb ? matmul(g2, a2, true, false) : matmul(a2, g2, true, false);
        }
        // A 2-D operand broadcast over batch dims gets the sum over the batch.
        if (da.shape() != a.shape()) da = sum_to(da, a.shape());
        if (db.shape() != b.shape()) db = sum_to(db, b.shape());
        return std::vector<Tensor>{da, db};
      });
}

}  // namespace driftless::ops
