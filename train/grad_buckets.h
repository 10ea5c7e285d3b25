// Data-parallel gradient reduction in buckets (ARCHITECTURE.md data flow: "parameter gradients
// ... reduced over the data group"). The gradient slab is cut into contiguous
// buckets of about bucket_bytes, built in reverse declaration order, the order in which the
// backward completes them. During the last backward pass of a step the autograd leaf hook
// reports each parameter as soon as its gradient is final; a bucket whose parameters are
// all final starts its all-reduce at once (NCCL: on a side stream, overlapping the rest of
// the backward; MPI/single: inline). finish() starts what is left and waits for all.
// For a sharded optimizer (shard > 0; slab_optimizer.h) a bucket is not all-reduced but
// reduced to the ranks owning its elements (rank r owns [r shard, (r+1) shard)), which is a
// reduce-scatter cut into buckets: afterwards each rank's own shard of the slab holds the sum
// over the data group.
#pragma once
#include <memory>
#include <unordered_map>
#include <vector>

#include "engine/autograd/autograd.h"
#include "layers/parameters.h"
#include "parallel/communicator.h"

namespace driftless::train {

class GradientBuckets {
 public:
  // bucket_bytes <= 0: one bucket over the whole slab. shard > 0: a sharded optimizer's
  // ownership.
  GradientBuckets(const layers::ParameterSlab& slab, parallel::Communicator& comm,
                  double bucket_bytes, int64_t shard = 0);
  // Clears readiness; call before the step's last backward pass.
  void start_step();
  // For autograd::backward of the step's last backward pass.
  autograd::LeafDoneHook hook();
  // Starts every bucket not started yet (parameters without a gradient this step), waits for
  // all; afterwards the slab holds the sums over the data group.
  void finish();
  int64_t size() const { return int64_t(buckets_.size()); }
  // Buckets started from the hook (during the backward) in the last step.
  int64_t started_early() const { return started_early_; }

 private:
  struct Bucket {
    int64_t begin = 0, end = 0;  // slab element range
    int64_t params = 0;          // parameters in it
    int64_t ready = 0;
    bool started = false;
    std::vector<std::unique_ptr<parallel::Work>> work;
  };
  void start(Bucket& b);

  const layers::ParameterSlab& slab_;
  parallel::Communicator& comm_;
  int64_t shard_ = 0;
  std::vector<Bucket> buckets_;
  std::unordered_map<const void*, size_t> bucket_of_;  // compute leaf -> bucket
  int64_t started_early_ = 0;
};

}  // namespace driftless::train
