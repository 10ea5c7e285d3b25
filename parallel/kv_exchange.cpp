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

void CommKvExchange::all_gather(const Tensor& span) {
  check_span("kv_exchange.all_gather", span);
  sdp_.all_gather_in_place(span);
}

void CommKvExchange::reduce_scatter(const Tensor& grad_span) {
  check_span("kv_exchange.reduce_scatter", grad_span);
  sdp_.reduce_scatter_in_place(grad_span);
}

std::unique_ptr<layers::KvExchange> make_kv_exchange(Communicator& sdp) {
  return std::make_unique<CommKvExchange>(sdp);
}

}  // namespace driftless::parallel
