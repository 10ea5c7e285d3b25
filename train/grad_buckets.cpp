// GradientBuckets (grad_buckets.h).
#include "train/grad_buckets.h"

#include <algorithm>

namespace driftless::train {

GradientBuckets::GradientBuckets(const layers::ParameterSlab& slab, parallel::Communicator& comm,
                                 double bucket_bytes, int64_t shard)
    : slab_(slab), comm_(comm), shard_(shard) {
  const auto& params = slab.parameters();
  const double elem = 4.0;  // f32 gradients
  for (size_t i = params.size(); i-- > 0;) {
    const layers::Parameter& p = params[i];
    const bool open_new =
        buckets_.empty() ||
        (bucket_bytes > 0 && double(buckets_.back().end - buckets_.back().begin) * elem >= bucket_bytes);
    if (open_new) buckets_.push_back({p.begin, p.end, 0, 0, false, {}});
    Bucket& b = buckets_.back();
    DL_CHECK(p.end == b.begin || b.params == 0, "grad_buckets",
             "parameters are not contiguous in the slab at " << p.name);
    b.begin = p.begin;
    ++b.params;
    bucket_of_[p.compute.impl_ptr().get()] = buckets_.size() - 1;
  }
}

void GradientBuckets::start_step() {
  for (auto& b : buckets_) {
    b.ready = 0;
    b.started = false;
    b.work.clear();
  }
  started_early_ = 0;
}

void GradientBuckets::start(Bucket& b) {
  b.started = true;
  const Tensor& g = slab_.grads();
  if (shard_ == 0) {
    b.work.push_back(comm_.all_reduce_async(g.narrow(0, b.begin, b.end - b.begin)));
    return;
  }
  for (int64_t r = b.begin / shard_; r * shard_ < b.end; ++r) {  // owners of the bucket
    const int64_t lo = std::max(b.begin, r * shard_), hi = std::min(b.end, (r + 1) * shard_);
    if (hi > lo) b.work.push_back(comm_.reduce_async(g.narrow(0, lo, hi - lo), int(r)));
  }
}

autograd::LeafDoneHook GradientBuckets::hook() {
  return [this](const Tensor& leaf) {
    auto it = bucket_of_.find(leaf.impl_ptr().get());
    if (it == bucket_of_.end()) return;  // not a parameter of this slab
    Bucket& b = buckets_[it->second];
    if (++b.ready == b.params && !b.started) {
      start(b);
      ++started_early_;
    }
  };
}

void GradientBuckets::finish() {
  for (auto& b : buckets_)
    if (!b.started) start(b);
  for (auto& b : buckets_)
    for (auto& w : b.work) w->wait();
}

}  // namespace driftless::train
