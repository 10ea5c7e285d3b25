// K/V buffer allocation and the write/read node with its gradient rule (kv_buffer.h).
#include "layers/attention/kv_buffer.h"

#include "engine/autograd/autograd.h"

namespace driftless::layers {

void KvBuffer::ensure(int64_t sequences, int64_t sequence_length, int64_t kv_heads,
                      int64_t head_dim, DType dtype, Device device, DType grad_dtype) {
  const Shape shape{sequences, sequence_length, 2, kv_heads, head_dim};
  if (kv_.defined() && kv_.shape() == shape && kv_.dtype() == dtype && kv_.device() == device &&
      grad_dtype_ == grad_dtype)
    return;
  kv_ = Tensor::zeros(shape, dtype, device);
  grad_ = Tensor();
  grad_dtype_ = grad_dtype;
  grad_dirty_ = false;
}

const Tensor& KvBuffer::grad_to_accumulate() const {
  if (!grad_.defined()) grad_ = Tensor::zeros(kv_.shape(), grad_dtype_, kv_.device());
  grad_dirty_ = true;
  return grad_;
}

namespace {
// (n S, 2, H_kv, D): the slice's sequences as one run of rows (a view: the buffer is
// contiguous and they are adjacent).
Tensor run_of(const Tensor& buf, const KvRows& s) {
  if (s.sequences == 1) return buf.select(0, s.sequence);
  return buf.narrow(0, s.sequence, s.sequences)
      .reshape({s.sequences * buf.size(1), buf.size(2), buf.size(3), buf.size(4)});
}
// (T, H_kv, D) rows [begin, end) of the slice's run, component c (0 = K, 1 = V).
Tensor rows(const Tensor& buf, const KvRows& s, int64_t begin, int64_t end, int64_t c) {
  return run_of(buf, s).narrow(0, begin, end - begin).select(1, c);
}
// (L, 2, H_kv, D) span of the micro-sequence containing [q0, q1) on rank r of P.
Tensor span(const Tensor& buf, const KvRows& s, const KvExchange& ex) {
  const int64_t rows_local = s.q1 - s.q0;
  const int64_t begin = s.q0 - ex.rank() * rows_local;
  return run_of(buf, s).narrow(0, begin, rows_local * ex.ranks());
}

// SDP without micro-sequences (the slice is this rank's whole chunk c of the sequence): the
// K/V gradients g of the extent [first_document_begin, q1), returned for [q0, q1). Only the
// chunks' last `tail` rows cross ranks, so only they are reduce-scattered, gathered from g
// into a packed (P, tail, 2, H_kv, D) tensor of the buffer's gradient dtype (zeros where
// this rank read nothing); the rest of the chunk is g as computed. The same sums, in the same
// order and dtype, as accumulating into the zeroed buffer and reduce-scattering its tails.
std::vector<Tensor> whole_chunk_grads(const KvRows& s, KvExchange& ex, DType grad_dtype, DType dt,
                                      const std::vector<Tensor>& g) {
  const int64_t P = ex.ranks(), r = ex.rank(), c = s.q1 - s.q0, fdb = s.first_document_begin;
  const int64_t tail = s.exchange_rows < 0 || s.exchange_rows > c ? c : s.exchange_rows;
  Tensor packed;
  if (tail > 0) {
    const Shape& row = g[0].shape();  // (T, H_kv, D)
    packed = Tensor::zeros({P, tail, 2, row[1], row[2]}, grad_dtype, g[0].device());
    for (int64_t p = 0; p <= r; ++p) {  // causal: nothing reads a later chunk
      const int64_t t0 = (p + 1) * c - tail, lo = std::max(t0, fdb), hi = (p + 1) * c;
      if (lo >= hi) continue;
      for (int64_t k = 0; k < 2; ++k)
        packed.select(0, p).narrow(0, lo - t0, hi - lo).select(1, k).copy_(
            g[size_t(k)].narrow(0, lo - fdb, hi - lo));
    }
    ex.reduce_scatter_packed(packed);
  }
  std::vector<Tensor> out;
  for (int64_t k = 0; k < 2; ++k) {
    Tensor own = Tensor::empty({c, g[0].size(1), g[0].size(2)}, dt, g[0].device());
    own.copy_(g[size_t(k)].narrow(0, s.q0 - fdb, c));
    if (packed.defined()) own.narrow(0, c - tail, tail).copy_(packed.select(0, r).select(1, k));
    out.push_back(own);
  }
  return out;
}
}  // namespace

std::pair<Tensor, Tensor> kv_write_read(KvBuffer& buffer, const KvRows& slice,
                                        const Tensor& k_local, const Tensor& v_local,
                                        KvExchange* exchange) {
  KvExchange& ex = exchange_or_single(exchange);
  const Tensor& kv = buffer.kv();
  DL_CHECK(kv.defined(), "kv_buffer", "buffer not allocated (call ensure first)");
  DL_CHECK(slice.sequences >= 1 && slice.sequence >= 0 &&
               slice.sequence + slice.sequences <= kv.size(0),
           "kv_buffer",
           "sequences [" << slice.sequence << ", " << slice.sequence + slice.sequences
                         << ") out of range for a buffer of " << kv.size(0));
  DL_CHECK(slice.sequences == 1 || ex.ranks() == 1, "kv_buffer",
           "a slice of several sequences takes the single-rank exchange");
  DL_CHECK(0 <= slice.first_document_begin && slice.first_document_begin <= slice.q0 &&
               slice.q0 <= slice.q1 && slice.q1 <= kv.size(1) * slice.sequences,
           "kv_buffer",
           "slice first_document_begin " << slice.first_document_begin << ", q [" << slice.q0
                                         << ", " << slice.q1 << ") does not fit "
                                         << slice.sequences << " sequence(s) of " << kv.size(1));
  const Shape local{slice.q1 - slice.q0, kv.size(3), kv.size(4)};
  DL_CHECK(k_local.shape() == local && v_local.shape() == local, "kv_buffer",
           "k/v " << shape_str(k_local.shape()) << " / " << shape_str(v_local.shape())
                  << " must be " << shape_str(local));
  {
    autograd::NoGradGuard no_grad;
    rows(kv, slice, slice.q0, slice.q1, 0).copy_(k_local);
    rows(kv, slice, slice.q0, slice.q1, 1).copy_(v_local);
    if (ex.ranks() > 1) ex.all_gather(span(kv, slice, ex), slice.exchange_rows);
  }
  Tensor k_ext = rows(kv, slice, slice.first_document_begin, slice.q1, 0).detach();
  Tensor v_ext = rows(kv, slice, slice.first_document_begin, slice.q1, 1).detach();
  autograd::Context ctx;
  // One rank, and the slice is its whole run from row 0 (no micro-sequences): no other
  // slice of the step reads or writes these rows, so the gradient buffer would hold exactly
  // this backward's gradient. It is returned as is, skipping the buffer's add and the
  // round trip through its (f32) dtype, which are exact here: the same bits.
  const bool sole = ex.ranks() == 1 && slice.q0 == 0 && slice.first_document_begin == 0 &&
                    slice.q1 == kv.size(1) * slice.sequences;
  // Several ranks, and the slice is this rank's whole chunk (no micro-sequences): only the
  // chunks' tails need the ranks' sum (whole_chunk_grads).
  const int64_t chunk = slice.q1 - slice.q0;
  const bool whole_chunk = ex.ranks() > 1 && chunk * ex.ranks() == kv.size(1) &&
                           slice.q0 == ex.rank() * chunk;
  auto outs = autograd::record(
      "kv_buffer", {k_local, v_local}, {k_ext, v_ext}, std::move(ctx),
      [&buffer, slice, &ex, sole, whole_chunk](
          autograd::Context&, const std::vector<Tensor>& g) -> std::vector<Tensor> {
        autograd::NoGradGuard no_grad;
        const DType dt = buffer.kv().dtype();
        if (sole) return {g[0].to(dt).contiguous(), g[1].to(dt).contiguous()};
        if (whole_chunk) return whole_chunk_grads(slice, ex, buffer.grad_dtype(), dt, g);
        const Tensor& grad = buffer.grad_to_accumulate();
        for (int64_t c = 0; c < 2; ++c)  // accumulate in the gradient buffer's dtype
          rows(grad, slice, slice.first_document_begin, slice.q1, c)
              .add_(g[size_t(c)].to(grad.dtype()));
        // Every later micro-sequence has run its backward: the slice is complete.
        if (ex.ranks() > 1) ex.reduce_scatter(span(grad, slice, ex), slice.exchange_rows);
        // A fresh copy in the K/V dtype (the buffer slice is reused by the next step).
        auto out = [&](int64_t c) {
          Tensor r = rows(grad, slice, slice.q0, slice.q1, c);
          return dt == grad.dtype() ? r.clone() : r.to(dt).contiguous();
        };
        return {out(0), out(1)};
      });
  return {outs[0], outs[1]};
}

}  // namespace driftless::layers
