// Host glue of the CUDA op bodies (backend.h): turns tensors into the POD layouts and
// pointers of kernels.cuh, allocates outputs and scratch from the caching allocator.
#include "engine/ops/cuda/backend.h"

#include <array>

#include "engine/core/device_ops.h"
#include "engine/ops/cuda/kernels.cuh"
#include "engine/ops/op_utils.h"

namespace driftless::ops::gpu {

namespace {

DType acc_dtype(DType dtype) {
  return dtype == DType::f64 ? DType::f64 : DType::f32;
}

Layout layout_of(const char* op, const Shape& shape) {
  DL_CHECK(shape.size() <= size_t(kMaxDims), op,
           "cuda kernels take at most " << kMaxDims << " dims, got " << shape_str(shape));
  Layout l;
  l.rank = int(shape.size());
  for (size_t d = 0; d < shape.size(); ++d) l.shape[d] = shape[d];
  return l;
}

Strides strides_of(const Shape& st) {
  Strides s;
  for (size_t d = 0; d < st.size(); ++d) s.v[d] = st[d];
  return s;
}

// Strides that read x as if broadcast to `out`, and whether they are out's row-major ones.
std::pair<Strides, bool> read_strides(const Tensor& x, const Shape& out) {
  Shape st = detail::broadcast_strides(x.shape(), x.strides(), out);
  Shape dense = contiguous_strides(out);
  bool is_dense = true;
  for (size_t d = 0; d < out.size(); ++d)
    if (out[d] != 1 && st[d] != dense[d]) is_dense = false;
  return {strides_of(st), is_dense};
}

Tensor empty_like_shape(const Shape& shape, DType dtype) {
  return Tensor::empty(shape, dtype, Device::cuda);
}

// Rows of a (n, v) matrix whose elements are contiguous within a row: their distance.
int64_t row_stride(const char* op, const Tensor& m) {
  DL_CHECK(m.dim() == 2 && (m.size(1) <= 1 || m.strides()[1] == 1) && m.strides()[0] >= m.size(1), op,
           "expects a (rows, v) matrix with contiguous rows, got shape "
               << shape_str(m.shape()) << " strides " << shape_str(m.strides()));
  return std::max<int64_t>(m.strides()[0], m.size(1));
}

}  // namespace

Tensor binary(Binary kind, const Tensor& a, const Tensor& b, const Shape& out_shape) {
  Tensor out = empty_like_shape(out_shape, a.dtype());
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
  Tensor out = empty_like_shape(out_shape, x.dtype());
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

Tensor gelu_backward(const Tensor& g, const Tensor& x) {
  Tensor out = empty_like_shape(x.shape(), x.dtype());
  auto [sg, dg] = read_strides(g, x.shape());
  auto [sx, dx] = read_strides(x, x.shape());
  launch_binary(BinaryKind::gelu_backward, x.dtype(), layout_of("gelu", x.shape()), dg && dx,
                g.raw_data(), sg, x.raw_data(), sx, out.raw_data(), out.numel());
  return out;
}

Tensor dropout(const Tensor& x, double p, uint64_t seed, const Tensor& row_ids, int64_t row_len) {
  DL_CHECK(
      row_ids.device() == Device::cuda && row_ids.dtype() == DType::i64 && row_ids.is_contiguous(),
      "dropout", "row ids must be contiguous i64 on the GPU");
  Tensor out = empty_like_shape(x.shape(), x.dtype());
  auto [sx, dx] = read_strides(x, x.shape());
  const double keep_scale = p < 1 ? 1.0 / (1.0 - p) : 0.0;
  launch_dropout(x.dtype(), layout_of("dropout", x.shape()), dx, x.raw_data(), sx, out.raw_data(),
                 out.numel(), row_ids.data<int64_t>(), row_len, keep_scale, p, seed);
  return out;
}

Tensor sum_to(const Tensor& x, const Shape& shape, double factor) {
  const char* op = "sum_to";
  Tensor out = empty_like_shape(shape, x.dtype());
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
  Tensor scratch = chunks > 1 ? empty_like_shape({chunks * L.n_out}, acc_dtype(x.dtype())) : Tensor();
  launch_reduce(x.dtype(), x.raw_data(), L, out.raw_data(), factor,
                scratch.defined() ? scratch.raw_data() : nullptr);
  return out;
}

std::vector<Tensor> layer_norm_forward(const Tensor& x, const Tensor& w, const Tensor& b,
                                       double eps) {
  const int64_t c = x.size(-1), rows = x.numel() / c;
  Tensor out = empty_like_shape(x.shape(), x.dtype());
  Tensor mean = empty_like_shape({rows}, acc_dtype(x.dtype()));
  Tensor rstd = empty_like_shape({rows}, acc_dtype(x.dtype()));
  launch_layer_norm_forward(x.dtype(), x.raw_data(), w.defined() ? w.raw_data() : nullptr,
                            b.defined() ? b.raw_data() : nullptr, out.raw_data(), mean.raw_data(),
                            rstd.raw_data(), rows, c, eps);
  return {out, mean, rstd};
}

std::vector<Tensor> layer_norm_backward(const Tensor& g_in, const Tensor& x, const Tensor& w,
                                        const Tensor& mean, const Tensor& rstd, bool want_w,
                                        bool want_b, const Tensor& dw_into,
                                        const Tensor& db_into, const Tensor& dx_add) {
  Tensor g = g_in.contiguous();
  DL_CHECK(!dx_add.defined() || (dx_add.is_contiguous() && dx_add.dtype() == x.dtype() &&
                                 dx_add.numel() == x.numel()),
           "layer_norm", "the gradient added to dx must be contiguous, of x's dtype and size");
  const int64_t c = x.size(-1), rows = c == 0 ? 0 : x.numel() / c;
  Tensor dx = empty_like_shape(x.shape(), x.dtype());
  // Accumulate into the given f32 storage only when every wanted gradient has some.
  const bool into = acc_dtype(x.dtype()) == DType::f32 && (want_w || want_b) &&
                    (!want_w || dw_into.defined()) && (!want_b || db_into.defined());
  for (const Tensor* t : {&dw_into, &db_into})
    DL_CHECK(!into || !t->defined() ||
                 (t->dtype() == DType::f32 && t->is_contiguous() && t->shape() == Shape({c})),
             "layer_norm", "gradients accumulate into contiguous f32 (" << c << ")");
  Tensor dw = want_w ? (into ? dw_into : empty_like_shape({c}, x.dtype())) : Tensor();
  Tensor db = want_b ? (into ? db_into : empty_like_shape({c}, x.dtype())) : Tensor();
  const int64_t chunks = layer_norm_chunks(rows);
  Tensor scratch;
  if (want_w || want_b)
    scratch = empty_like_shape({std::max<int64_t>(2 * chunks * c, 1)}, acc_dtype(x.dtype()));
  if (rows == 0 && !into) {
    if (dw.defined()) dw.zero_();
    if (db.defined()) db.zero_();
  }
  launch_layer_norm_backward(x.dtype(), g.raw_data(), x.raw_data(),
                             w.defined() ? w.raw_data() : nullptr, mean.raw_data(), rstd.raw_data(),
                             dx_add.defined() ? dx_add.raw_data() : nullptr, dx.raw_data(),
                             dw.defined() ? dw.raw_data() : nullptr,
                             db.defined() ? db.raw_data() : nullptr,
                             scratch.defined() ? scratch.raw_data() : nullptr, rows, c, into);
  if (into) return {dx, Tensor(), Tensor()};
  return {dx, dw, db};
}

std::vector<Tensor> rms_norm_forward(const Tensor& x, const Tensor& w, double eps) {
  const int64_t c = x.size(-1), rows = x.numel() / c;
  Tensor out = empty_like_shape(x.shape(), x.dtype());
  Tensor rstd = empty_like_shape({rows}, acc_dtype(x.dtype()));
  launch_rms_norm_forward(x.dtype(), x.raw_data(), w.raw_data(), out.raw_data(), rstd.raw_data(),
                          rows, c, eps);
  return {out, rstd};
}

std::vector<Tensor> rms_norm_backward(const Tensor& g_in, const Tensor& x, const Tensor& w,
                                      const Tensor& rstd, bool want_w, const Tensor& dw_into,
                                      const Tensor& dx_add) {
  Tensor g = g_in.contiguous();
  DL_CHECK(!dx_add.defined() || (dx_add.is_contiguous() && dx_add.dtype() == x.dtype() &&
                                 dx_add.numel() == x.numel()),
           "rms_norm", "the gradient added to dx must be contiguous, of x's dtype and size");
  const int64_t c = x.size(-1), rows = c == 0 ? 0 : x.numel() / c;
  Tensor dx = empty_like_shape(x.shape(), x.dtype());
  const bool into = want_w && dw_into.defined() && acc_dtype(x.dtype()) == DType::f32;
  DL_CHECK(!into || (dw_into.dtype() == DType::f32 && dw_into.is_contiguous() &&
                     dw_into.shape() == Shape({c})),
           "rms_norm", "the weight gradient accumulates into contiguous f32 (" << c << ")");
  Tensor dw = want_w ? (into ? dw_into : empty_like_shape({c}, x.dtype())) : Tensor();
  Tensor scratch;
  if (want_w) {
    scratch =
        empty_like_shape({std::max<int64_t>(rms_norm_chunks(rows) * c, 1)}, acc_dtype(x.dtype()));
    if (rows == 0 && !into) dw.zero_();
  }
  launch_rms_norm_backward(x.dtype(), g.raw_data(), x.raw_data(), w.raw_data(), rstd.raw_data(),
                           dx_add.defined() ? dx_add.raw_data() : nullptr, dx.raw_data(),
                           dw.defined() ? dw.raw_data() : nullptr,
                           scratch.defined() ? scratch.raw_data() : nullptr, rows, c, into);
  if (into) return {dx, Tensor()};
  return {dx, dw};
}

Tensor swiglu_forward(const Tensor& gate_up) {
  const int64_t two_f = gate_up.size(-1), rows = two_f == 0 ? 0 : gate_up.numel() / two_f;
  Shape shape = gate_up.shape();
  shape.back() = two_f / 2;
  Tensor out = empty_like_shape(shape, gate_up.dtype());
  launch_swiglu_forward(gate_up.dtype(), gate_up.raw_data(), out.raw_data(), rows, two_f / 2);
  return out;
}

Tensor swiglu_backward(const Tensor& g_in, const Tensor& gate_up) {
  Tensor g = g_in.contiguous();
  const int64_t two_f = gate_up.size(-1), rows = two_f == 0 ? 0 : gate_up.numel() / two_f;
  Tensor d = empty_like_shape(gate_up.shape(), gate_up.dtype());
  launch_swiglu_backward(gate_up.dtype(), g.raw_data(), gate_up.raw_data(), d.raw_data(), rows,
                         two_f / 2);
  return d;
}

Tensor rope(const Tensor& x, const Tensor& positions, int64_t rotated, int64_t d,
            const std::vector<float>& inv_freq, bool inverse) {
  DL_CHECK(positions.device() == Device::cuda && positions.dtype() == DType::i32 &&
               positions.is_contiguous(),
           "rope", "positions must be contiguous i32 on the GPU");
  DL_CHECK(inv_freq.size() <= size_t(kRopeMaxHalf), "rope",
           "head dim " << d << " is over the cuda kernel's " << 2 * kRopeMaxHalf);
  RopeFreqs freqs;
  for (size_t i = 0; i < inv_freq.size(); ++i) freqs.inv_freq[i] = inv_freq[i];
  Tensor out = empty_like_shape(x.shape(), x.dtype());
  launch_rope(x.dtype(), x.raw_data(), positions.data<int32_t>(), out.raw_data(), x.size(0),
              x.size(1), rotated, d, freqs, inverse);
  return out;
}

Tensor softmax_forward(const Tensor& x_in, int64_t d, bool log) {
  Tensor x = x_in.contiguous();
  detail::Dims3 s = detail::dims3(x.shape(), d);
  Tensor y = empty_like_shape(x.shape(), x.dtype());
  launch_softmax_forward(x.dtype(), x.raw_data(), y.raw_data(), s.outer, s.n, s.inner, log);
  return y;
}

Tensor softmax_backward(const Tensor& g_in, const Tensor& y, int64_t d, bool log) {
  Tensor g = g_in.contiguous();
  detail::Dims3 s = detail::dims3(y.shape(), d);
  Tensor dx = empty_like_shape(y.shape(), y.dtype());
  launch_softmax_backward(y.dtype(), g.raw_data(), y.raw_data(), dx.raw_data(), s.outer, s.n,
                          s.inner, log);
  return dx;
}

namespace {
// {loss, lse}, and dlogits when go is defined (cross_entropy_forward_backward).
std::vector<Tensor> cross_entropy_rows(const Tensor& logits, const Tensor& targets,
                                       const Tensor& mask, const Tensor& go, DType grad_dtype,
                                       const Tensor& into = Tensor(),
                                       const Tensor& row_loss_into = Tensor()) {
  const int64_t n = logits.size(0), v = logits.size(1), ld = row_stride("cross_entropy", logits);
  const DType acc = acc_dtype(logits.dtype());
  Tensor lse = empty_like_shape({n}, acc);
  if (row_loss_into.defined())
    DL_CHECK(row_loss_into.device() == Device::cuda && row_loss_into.dtype() == acc &&
                 row_loss_into.shape() == Shape{n} && row_loss_into.is_contiguous(),
             "cross_entropy", "row losses must go into contiguous " << dtype_name(acc) << " ["
                                                                    << n << "]");
  Tensor row_loss = row_loss_into.defined() ? row_loss_into : empty_like_shape({n}, acc);
  Tensor loss = row_loss_into.defined() ? Tensor() : empty_like_shape({}, logits.dtype());
  Tensor g, dlogits;
  if (go.defined()) {
    g = go.to(Device::cuda, logits.dtype()).contiguous();
    // dlogits in the logits' row layout (a padded ld keeps the GEMMs that read it aligned).
    if (into.defined()) {
      DL_CHECK(into.device() == Device::cuda && into.dtype() == grad_dtype &&
                   into.shape() == logits.shape() && into.strides()[1] == 1 &&
                   (n <= 1 || into.strides()[0] == ld),
               "cross_entropy", "dlogits must go into " << shape_str(logits.shape()) << " "
                   << dtype_name(grad_dtype) << " with the logits' row stride " << ld);
      dlogits = into;
    } else {
      dlogits = empty_like_shape({n, ld}, grad_dtype).narrow(1, 0, v);
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
  Tensor scratch = empty_like_shape({parts}, acc);
  launch_sum_all(acc, row_loss.raw_data(), n, false, false, scratch.raw_data(), loss.raw_data(),
                 loss.dtype(), 1.0);
  return {loss, lse, dlogits};
}
}  // namespace

std::vector<Tensor> cross_entropy_forward(const Tensor& logits, const Tensor& targets,
                                          const Tensor& mask, const Tensor& row_loss_into) {
  std::vector<Tensor> r = cross_entropy_rows(logits, targets, mask, Tensor(), logits.dtype(),
                                             Tensor(), row_loss_into);
  return {r[0], r[1]};
}

std::vector<Tensor> cross_entropy_forward_backward(const Tensor& go, const Tensor& logits,
                                                   const Tensor& targets, const Tensor& mask,
                                                   std::optional<DType> grad_dtype,
                                                   const Tensor& into, const Tensor& row_loss_into) {
  std::vector<Tensor> r = cross_entropy_rows(logits, targets, mask, go,
                                             grad_dtype.value_or(logits.dtype()), into, row_loss_into);
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
  Tensor dlogits = empty_like_shape({n, ld}, gdt).narrow(1, 0, v);
  Tensor dmask = want_mask ? empty_like_shape({n}, logits.dtype()) : Tensor();
  launch_cross_entropy_backward(logits.dtype(), g.raw_data(), logits.raw_data(),
                                targets.data<int64_t>(), mask.defined() ? mask.raw_data() : nullptr,
                                lse.raw_data(), dlogits.raw_data(), gdt,
                                dmask.defined() ? dmask.raw_data() : nullptr, n, v, ld);
  return {dlogits, dmask};
}

Tensor embedding_forward(const Tensor& weight, const std::vector<int64_t>& ids,
                         const Shape& ids_shape) {
  const int64_t c = weight.size(1), n = int64_t(ids.size());
  Shape out_shape = ids_shape;
  out_shape.push_back(c);
  Tensor out = empty_like_shape(out_shape, weight.dtype());
  if (n == 0) return out;
  Tensor dev_ids = Tensor::from_vector(ids).to(Device::cuda);
  launch_embedding_forward(weight.dtype(), weight.raw_data(), dev_ids.data<int64_t>(),
                           out.raw_data(), n, c);
  return out;
}

Tensor embedding_backward(const Tensor& g_in, const std::vector<int64_t>& ids,
                          const Shape& weight_shape, const Tensor& into) {
  const int64_t v = weight_shape[0], c = weight_shape[1];
  Tensor g = g_in.contiguous();
  // Positions grouped by id in increasing order (counting sort, stable): row r owns
  // positions[offsets[r] .. offsets[r+1]).
  std::vector<int64_t> offsets(size_t(v) + 1, 0), positions(ids.size());
  for (int64_t id : ids) ++offsets[size_t(id) + 1];
  for (int64_t r = 0; r < v; ++r) offsets[size_t(r) + 1] += offsets[size_t(r)];
  std::vector<int64_t> fill(offsets.begin(), offsets.end() - 1);
  for (size_t i = 0; i < ids.size(); ++i) positions[size_t(fill[size_t(ids[i])]++)] = int64_t(i);
  Tensor dev_off = Tensor::from_vector(offsets).to(Device::cuda);
  Tensor dev_pos = positions.empty() ? Tensor::empty({1}, DType::i64, Device::cuda)
                                     : Tensor::from_vector(positions).to(Device::cuda);
  if (into.defined()) {
    DL_CHECK(into.dtype() == DType::f32 && into.is_contiguous() && into.shape() == weight_shape,
             "embedding", "gradient storage must be contiguous f32 " << shape_str(weight_shape)
                                                                     << ", got "
                                                                     << shape_str(into.shape()));
    std::vector<int64_t> hit;  // the rows some id hits, increasing
    for (int64_t r = 0; r < v; ++r)
      if (offsets[size_t(r) + 1] > offsets[size_t(r)]) hit.push_back(r);
    if (hit.empty()) return Tensor();
    Tensor dev_rows = Tensor::from_vector(hit).to(Device::cuda);
    launch_embedding_backward_into(g.dtype(), g.raw_data(), dev_off.data<int64_t>(),
                                   dev_pos.data<int64_t>(), dev_rows.data<int64_t>(),
                                   int64_t(hit.size()), into.data<float>(), c);
    return Tensor();
  }
  Tensor dw = empty_like_shape(weight_shape, g.dtype());
  launch_embedding_backward(g.dtype(), g.raw_data(), dev_off.data<int64_t>(),
                            dev_pos.data<int64_t>(), dw.raw_data(), v, c);
  return dw;
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

double sum_squares(const Tensor& x) {
  const int parts = sum_all_parts(x.numel());
  Tensor scratch = empty_like_shape({parts}, DType::f64);
  Tensor out = empty_like_shape({}, DType::f64);
  if (x.numel() == 0) return 0.0;
  launch_sum_all(x.dtype(), x.raw_data(), x.numel(), true, true, scratch.raw_data(), out.raw_data(),
                 DType::f64, 1.0);
  return out.item();
}

void scale_inplace(const Tensor& x, double factor) {
  launch_scale_inplace(x.dtype(), x.raw_data(), x.numel(), factor);
}

}  // namespace driftless::ops::gpu
