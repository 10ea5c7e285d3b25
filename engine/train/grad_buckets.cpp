// GradientBuckets (grad_buckets.h).
#include "engine/train/grad_buckets.h"

namespace driftless::train {

GradientBuckets::GradientBuckets(const layers::ParameterSlab& slab, parallel::Communicator& comm,
                                 double bucket_bytes)
    : slab_(slab), comm_(comm) {
  const auto& params = slab.parameters();
  const double elem = 4.0;  // f32 gradients
  for (size_t i = params.size(); i-- > 0;) {
    const layers::Parameter& p = params[i];
    const bool open_new =
        buckets_.empty() ||
        (bucket_bytes > 0 && double(buckets_.back().end - buckets_.back().begin) * elem >= bucket_bytes);
    if (open_new) buckets_.push_back({p.begin, p.end, 0, 0, nullptr});
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
    b.work.reset();
  }
  started_early_ = 0;
}

void GradientBuckets::start(Bucket& b) {
  b.work = comm_.all_reduce_async(slab_.grads().narrow(0, b.begin, b.end - b.begin));
}

autograd::LeafDoneHook GradientBuckets::hook() {
  return [this](const Tensor& leaf) {
    auto it = bucket_of_.find(leaf.impl_ptr().get());
    if (it == bucket_of_.end()) return;  // not a parameter of this slab
    Bucket& b = buckets_[it->second];
    if (++b.ready == b.params && !b.work) {
      start(b);
      ++started_early_;
    }
  };
}

void GradientBuckets::finish() {
  for (auto& b : buckets_)
    if (!b.work) start(b);
  for (auto& b : buckets_) b.work->wait();
}

}  // namespace driftless::train
