// The optimizer over the parameter slab and the reduction of the gradients it reads
// (ARCHITECTURE.md "Data flow of one training step"): AdamW whose state is whole on every
// rank, or sharded over the data group (distributed.zero_stage 1: rank r owns slab elements
// [r n, min((r+1) n, N)) of the moments, its gradient buckets are reduced to their owners, and
// the updated parameters are all-gathered). The trainer calls the same interface either way.
#pragma once
#include <functional>
#include <memory>
#include <string>

#include "engine/autograd/autograd.h"
#include "engine/optim/adamw.h"
#include "layers/parameters.h"
#include "parallel/communicator.h"
#include "train/checkpoint.h"
#include "train/config.h"
#include "train/grad_buckets.h"

namespace driftless::train {

struct SlabOptimizerOptions {
  optim::AdamWConfig adamw;
  bool shard = false;       // shard the optimizer state over the data group (when > 1 rank)
  double bucket_bytes = 0;  // gradient buckets (grad_buckets.h); <= 0: one bucket
  Device device = Device::cpu;
  // Whether AdamW decays a parameter; unset: its own weight_decay flag.
  std::function<bool(const layers::Parameter&)> decays;
  // The run's: optimizer.*, distributed.zero_stage and bucket_mb, precision.device.
  static SlabOptimizerOptions of(const Config& config);
};

class SlabOptimizer {
 public:
  // data_group: the ranks that reduce gradients (nullptr or one rank: no reduction);
  // control: host collectives (the first non-finite gradient), defaulting to data_group.
  SlabOptimizer(layers::ParameterSlab& slab, const SlabOptimizerOptions& options,
                parallel::Communicator* data_group, parallel::Communicator* control);
  ~SlabOptimizer();

  // The step's last backward pass: call start_step() before it and pass hook() to it, so
  // finished gradient buckets start their reduction while the backward goes on.
  void start_step();
  autograd::LeafDoneHook hook();
  // Waits for the gradient reduction; returns the gradients this rank updates with, summed
  // over the data group (the whole slab, or this rank's shard of it).
  Tensor reduced_grads();
  // The squared norm of the whole reduced gradient, from reduced_grads()'s result.
  double grad_norm_squared(const Tensor& reduced) const;
  // Makes the whole gradient slab hold the reduced sums (for the tensor log).
  void gather_grads(const Tensor& reduced);
  // One AdamW update with the reduced gradients (times grad_scale), after which every rank's
  // parameters, and their compute copy, hold the updated values.
  void step(const Tensor& reduced, double lr, double grad_scale);
  // The first parameter whose reduced gradient holds a NaN or an infinity, agreed over the
  // ranks, or "".
  std::string first_non_finite_gradient() const;
  // The whole optimizer state for a checkpoint (a collective when sharded).
  OptimizerSnapshot snapshot();
  // What a checkpoint restores (load_checkpoint takes this rank's part of the moments).
  optim::AdamW& adamw() { return *adamw_; }

 private:
  bool sharded() const { return gather_buffer_.defined(); }
  Tensor own(const Tensor& slab) const;  // this rank's shard of a slab-long tensor
  // Every rank's shard of `slab` into slab, from this rank's own_shard (sharded only).
  void all_gather(const Tensor& slab, const Tensor& own_shard);

  layers::ParameterSlab& slab_;
  parallel::Communicator* data_group_;
  parallel::Communicator* control_;
  Device device_;
  std::unique_ptr<optim::AdamW> adamw_;
  std::unique_ptr<GradientBuckets> buckets_;  // with more than one rank
  Tensor gather_buffer_;                      // sharded: (P * n) padded slab for the collectives
};

}  // namespace driftless::train
