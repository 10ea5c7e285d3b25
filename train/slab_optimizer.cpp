// SlabOptimizer (slab_optimizer.h).
#include "train/slab_optimizer.h"

#include <algorithm>
#include <cmath>

#include "engine/optim/clip.h"
#include "train/rank_agreement.h"

namespace driftless::train {

SlabOptimizerOptions SlabOptimizerOptions::of(const Config& c) {
  SlabOptimizerOptions o;
  o.adamw.beta1 = c.optimizer.beta1;
  o.adamw.beta2 = c.optimizer.beta2;
  o.adamw.eps = c.optimizer.eps;
  o.adamw.weight_decay = c.optimizer.weight_decay;
  o.shard = c.distributed.zero_stage == 1;  // ZeRO-1
  o.bucket_bytes = c.distributed.bucket_mb * (1 << 20);
  o.device = c.precision.device;
  return o;
}

SlabOptimizer::SlabOptimizer(layers::ParameterSlab& slab, const SlabOptimizerOptions& o,
                             parallel::Communicator* data_group, parallel::Communicator* control)
    : slab_(slab),
      data_group_(data_group),
      control_(control ? control : data_group),
      device_(o.device) {
  std::vector<optim::ParamRange> ranges;
  for (const auto& p : slab.parameters())
    ranges.push_back({p.name, p.begin, p.end, o.decays ? o.decays(p) : p.weight_decay});
  const int64_t N = slab.numel(), world = data_group ? data_group->size() : 1;
  if (o.shard && world > 1) {
    // Rank r owns slab elements [r n, min((r+1) n, N)) of the optimizer state.
    const int64_t n = (N + world - 1) / world, r = data_group->rank();
    gather_buffer_ = Tensor::zeros({world * n}, DType::f32, device_);
    adamw_ = std::make_unique<optim::AdamW>(o.adamw, ranges, N, std::min(r * n, N),
                                            std::min((r + 1) * n, N), device_);
    // Gradient buckets reduced to their owners during the backward: a bucketed reduce-scatter.
    buckets_ = std::make_unique<GradientBuckets>(slab, *data_group, o.bucket_bytes, n);
  } else {
    adamw_ = std::make_unique<optim::AdamW>(o.adamw, ranges, N, device_);
    if (world > 1) buckets_ = std::make_unique<GradientBuckets>(slab, *data_group, o.bucket_bytes);
  }
}

SlabOptimizer::~SlabOptimizer() = default;

void SlabOptimizer::start_step() {
  if (buckets_) buckets_->start_step();
}

autograd::LeafDoneHook SlabOptimizer::hook() {
  return buckets_ ? buckets_->hook() : autograd::LeafDoneHook();
}

Tensor SlabOptimizer::own(const Tensor& slab) const {
  return slab.narrow(0, adamw_->shard_begin(), adamw_->shard_end() - adamw_->shard_begin());
}

Tensor SlabOptimizer::reduced_grads() {
  // All-reduced over the data group, or reduced to each shard's owner.
  if (buckets_) buckets_->finish();
  return sharded() ? own(slab_.grads()) : slab_.grads();
}

double SlabOptimizer::grad_norm_squared(const Tensor& reduced) const {
  const double mine = optim::grad_norm_squared(reduced);
  if (!sharded()) return mine;
  Tensor t = Tensor::full({1}, mine, DType::f64, device_);  // on the communicator's device
  data_group_->all_reduce(t);
  return t.item();
}

void SlabOptimizer::gather_grads(const Tensor& reduced) {
  if (sharded()) all_gather(slab_.grads(), reduced);
}

void SlabOptimizer::step(const Tensor& reduced, double lr, double grad_scale) {
  const Tensor& params = slab_.params();
  // Unsharded, the optimizer also writes the bf16 compute copy in its pass; sharded, the
  // other ranks' shards arrive in f32 and the copy is made after the gather.
  const Tensor& compute = slab_.compute();
  const bool fused_sync = compute.defined() && compute.dtype() == DType::bf16 && !sharded();
  adamw_->step(params, reduced, lr, grad_scale, fused_sync ? compute : Tensor());
  if (sharded()) all_gather(params, own(params));
  if (!fused_sync) slab_.sync_compute();
}

std::string SlabOptimizer::first_non_finite_gradient() const {
  const auto& params = slab_.parameters();
  // This rank's reduced gradients: the whole slab, or its shard.
  const int64_t b = sharded() ? adamw_->shard_begin() : 0;
  const int64_t e = sharded() ? adamw_->shard_end() : slab_.numel();
  int64_t first = int64_t(params.size());
  for (size_t i = 0; i < params.size() && first == int64_t(params.size()); ++i) {
    const int64_t lo = std::max(b, params[i].begin), hi = std::min(e, params[i].end);
    if (lo < hi && !std::isfinite(optim::grad_norm_squared(slab_.grads().narrow(0, lo, hi - lo))))
      first = int64_t(i);
  }
  if (sharded()) first = -all_ranks_max(*control_, -first);
  return first < int64_t(params.size()) ? params[size_t(first)].name : "";
}

void SlabOptimizer::all_gather(const Tensor& slab, const Tensor& own_shard) {
  const int64_t N = slab.numel();
  const int64_t b = adamw_->shard_begin(), e = adamw_->shard_end();
  if (!own_shard.shares_storage(gather_buffer_) || own_shard.offset() != b)
    gather_buffer_.narrow(0, b, e - b).copy_(own_shard);
  data_group_->all_gather_in_place(gather_buffer_);
  slab.copy_(gather_buffer_.narrow(0, 0, N));
}

OptimizerSnapshot SlabOptimizer::snapshot() {
  OptimizerSnapshot snap = OptimizerSnapshot::of(*adamw_);
  if (!sharded()) return snap;
  // Every rank takes part in gathering the sharded moments.
  const int64_t N = slab_.numel();
  Tensor m = Tensor::zeros({N}), v = Tensor::zeros({N});
  all_gather(m, snap.m);
  all_gather(v, snap.v);
  return {m, v, snap.step, 0, N};
}

}  // namespace driftless::train
