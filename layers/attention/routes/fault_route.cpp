// The fault route (fault_route.h).
#include "layers/attention/routes/fault_route.h"

#include <algorithm>
#include <memory>

#include "engine/autograd/autograd.h"

namespace driftless::layers {

// Forwards to the real exchange (or is the single rank), except that while `skip` is set
// gradient sums stay this rank's partial ones.
class FaultRoute::Exchange : public KvExchange {
 public:
  explicit Exchange(KvExchange* real) : real_(&exchange_or_single(real)) {}
  int64_t ranks() const override { return real_->ranks(); }
  int64_t rank() const override { return real_->rank(); }
  void all_gather(const Tensor& span, int64_t rows) override { real_->all_gather(span, rows); }
  void reduce_scatter(const Tensor& grad_span, int64_t rows) override {
    if (!skip) real_->reduce_scatter(grad_span, rows);
  }
  void reduce_scatter_packed(const Tensor& packed) override {
    if (!skip) real_->reduce_scatter_packed(packed);
  }
  void all_to_all(const Tensor& out, const Tensor& in) override { real_->all_to_all(out, in); }
  bool skip = false;

 private:
  KvExchange* real_;
};

FaultRoute::FaultRoute(
    const RouteFaults& faults, KvExchange* exchange,
    const std::function<std::unique_ptr<AttentionRoute>(KvExchange*)>& make_inner)
    : faults_(faults), exchange_(std::make_unique<Exchange>(exchange)) {
  inner_ = make_inner(exchange ? exchange_.get() : nullptr);
}

FaultRoute::~FaultRoute() = default;

namespace {

// The classic bug: cu_seqlens_k in absolute positions, shifted by the past (max_seqlen_k
// kept consistent with it).
data::ModelInput shifted_cu_seqlens_k(data::ModelInput in) {
  if (in.padded() || in.first_document_begin == 0 || in.cu_seqlens_k.empty()) return in;
  const int32_t shift = int32_t(in.first_document_begin);
  auto& cu = in.cu_seqlens_k;
  for (auto& c : cu) c = std::min<int32_t>(c + shift, cu.back());
  cu[0] = 0;
  for (size_t n = 0; n + 1 < cu.size(); ++n)
    in.max_seqlen_k = std::max<int32_t>(in.max_seqlen_k, cu[n + 1] - cu[n]);
  return in;
}

// Identity whose backward zeroes the gradient of qkv's K and V columns.
Tensor drop_kv_grad(const Tensor& qkv, int64_t q_columns) {
  return autograd::record("fault_drop_kv_grad", {qkv}, qkv.detach(), autograd::Context{},
                          [q_columns](autograd::Context&, const std::vector<Tensor>& g) {
                            autograd::NoGradGuard no_grad;
                            Tensor d = g[0].clone();
                            d.narrow(1, q_columns, d.size(1) - q_columns).zero_();
                            return std::vector<Tensor>{d};
                          });
}

// Identity whose backward runs `f` (before the backward of what produced x).
Tensor on_backward(const Tensor& x, std::function<void()> f) {
  return autograd::record("fault_mark", {x}, x.detach(), autograd::Context{},
                          [f](autograd::Context&, const std::vector<Tensor>& g) {
                            f();
                            return std::vector<Tensor>{g[0]};
                          });
}

}  // namespace

Tensor FaultRoute::attend(const RouteCall& call, const Tensor& qkv) {
  const bool here = call.layer == faults_.layer;
  Tensor in = qkv;
  if (here && faults_.drop_kv_grad_slice)
    in = drop_kv_grad(qkv, call.shape.heads * call.shape.head_dim);
  std::vector<PartInput> slice = *call.slice;
  if (here && faults_.cu_seqlens_k_from_begin)
    for (auto& s : slice)
      s.input = std::make_shared<const data::ModelInput>(shifted_cu_seqlens_k(*s.input));
  RouteCall c = call;
  c.slice = &slice;
  exchange_->skip = false;
  Tensor y = inner_->attend(c, in);
  // The backward of this layer's attention (and of its K/V buffer) runs after this mark's
  // and before any other layer's: the exchange knows whose gradients it sums.
  if (!faults_.skip_kv_reduce_scatter) return y;
  Exchange* ex = exchange_.get();
  return on_backward(y, [ex, here] { ex->skip = here; });
}

}  // namespace driftless::layers
