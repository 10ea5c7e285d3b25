// CommKvExchange (kv_exchange.h): in-place collectives on the micro-sequence's span.
#include "parallel/kv_exchange.h"

namespace driftless::parallel {

void CommKvExchange::check_span(const char* op, const Tensor& span) const {
  DL_CHECK(span.defined() && span.dim() >= 1 && span.is_contiguous(), op,
           "span must be a contiguous tensor with a row dimension, got "
               << (span.defined() ? shape_str(span.shape()) : std::string("undefined")));
  DL_CHECK(
      span.size(0) % sdp_.size() == 0, op,
      "span of " << span.size(0) << " rows does not divide over " << sdp_.size() << " sdp ranks");
}

Tensor CommKvExchange::chunk_tails(const Tensor& span, int64_t rows) const {
  const int64_t P = sdp_.size(), c = span.size(0) / P;
  Shape chunked = span.shape();
  chunked[0] = c;
  chunked.insert(chunked.begin(), P);
  return span.view(chunked).narrow(1, c - rows, rows);
}

// With packed documents a rank reads only the end of the chunk before its own (from the
// start of the document that crosses into it), so moving just the chunks' tails cuts the
// traffic from L rows to P x rows per micro-sequence and layer.
// The tails travel packed as one contiguous (P, rows, ...) tensor: rank r's tail is its
// slice r, which is the chunk the in-place collectives give rank r.
void CommKvExchange::all_gather(const Tensor& span, int64_t rows) {
  check_span("kv_exchange.all_gather", span);
  if (rows < 0 || rows >= span.size(0) / sdp_.size()) return sdp_.all_gather_in_place_ordered(span);
  if (rows == 0) return;
  Tensor tails = chunk_tails(span, rows);
  Tensor packed = Tensor::empty(tails.shape(), span.dtype(), span.device());
  packed.select(0, sdp_.rank()).copy_(tails.select(0, sdp_.rank()));
  sdp_.all_gather_in_place_ordered(packed);
  tails.copy_(packed);  // this rank's own tail gets its own values back
}

void CommKvExchange::reduce_scatter(const Tensor& grad_span, int64_t rows) {
  check_span("kv_exchange.reduce_scatter", grad_span);
  if (rows < 0 || rows >= grad_span.size(0) / sdp_.size())
    return sdp_.reduce_scatter_in_place_ordered(grad_span);
  if (rows == 0) return;
  Tensor tails = chunk_tails(grad_span, rows);
  Tensor packed = tails.clone();
  reduce_scatter_packed(packed);
  tails.select(0, sdp_.rank()).copy_(packed.select(0, sdp_.rank()));
}

void CommKvExchange::reduce_scatter_packed(const Tensor& packed) {
  DL_CHECK(packed.defined() && packed.dim() >= 2 && packed.is_contiguous() &&
               packed.size(0) == sdp_.size(),
           "kv_exchange.reduce_scatter_packed",
           "packed tails must be a contiguous ("
               << sdp_.size() << ", rows, ...) tensor, got "
               << (packed.defined() ? shape_str(packed.shape()) : std::string("undefined")));
  sdp_.reduce_scatter_in_place_ordered(packed);
}

std::unique_ptr<KvExchange> make_kv_exchange(Communicator& sdp) {
  return std::make_unique<CommKvExchange>(sdp);
}

}  // namespace driftless::parallel
