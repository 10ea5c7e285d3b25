// AdamW (decoupled weight decay, bias correction, fp32 moments) over the flat parameter
// slab of ARCHITECTURE.md "Memory in a step": one optimizer pass covers every parameter. Weight
// decay is chosen per range of the slab (off for biases and layer-norm gains), and the
// optimizer may own only a shard [shard_begin, shard_end) of the slab (ZeRO-1).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "engine/core/tensor.h"
#include "engine/optim/adamw_kernel.h"

namespace driftless::optim {

struct AdamWConfig {
  double lr = 3e-4;  // used by step(params, grads); a schedule passes its own lr instead
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;  // applied only to ranges with weight_decay = true
};

// Elements [begin, end) of the parameter slab: one parameter tensor, or several that share
// the decay flag. Elements of the slab outside every range are never touched (padding).
struct ParamRange {
  std::string name;
  int64_t begin = 0;
  int64_t end = 0;
  bool weight_decay = true;
};

// What a checkpoint saves. m and v are f32 of length shard_end - shard_begin, on the
// optimizer's device; element i belongs to slab element shard_begin + i.
struct AdamWState {
  Tensor m;
  Tensor v;
  int64_t step = 0;  // updates done so far; the next update uses t = step + 1
};

class AdamW {
 public:
  // The whole slab of slab_numel elements. Ranges must be sorted, disjoint and inside
  // [0, slab_numel). Moments are allocated here, once, zeroed, on `device`.
  AdamW(const AdamWConfig& config, std::vector<ParamRange> ranges, int64_t slab_numel,
        Device device = Device::cpu);
  // Only the shard [shard_begin, shard_end) of the slab; ranges may cross its edges.
  AdamW(const AdamWConfig& config, std::vector<ParamRange> ranges, int64_t slab_numel,
        int64_t shard_begin, int64_t shard_end, Device device = Device::cpu);

  // One update of the shard with learning rate lr:
  //   p <- p * (1 - lr * wd);  m <- b1 m + (1 - b1) g;  v <- b2 v + (1 - b2) g^2
  //   p <- p - lr * (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps)
  // params and grads are 1-D contiguous f32 on the optimizer's device, each either the
  // whole slab (slab_numel elements) or just the shard (shard_end - shard_begin).
  // grad_scale multiplies the gradients as they are read (the clipping factor, rounded to
  // f32), and a defined `compute` (the bf16 compute slab, or its shard: as params) receives
  // the updated parameters rounded to bf16, both in the same pass over the elements.
  void step(const Tensor& params, const Tensor& grads, double lr, double grad_scale = 1.0,
            const Tensor& compute = Tensor());
  void step(const Tensor& params, const Tensor& grads) { step(params, grads, config_.lr); }

  const AdamWConfig& config() const { return config_; }
  const std::vector<ParamRange>& ranges() const { return ranges_; }
  int64_t slab_numel() const { return slab_numel_; }
  int64_t shard_begin() const { return shard_begin_; }
  int64_t shard_end() const { return shard_end_; }
  Device device() const { return device_; }

  const AdamWState& state() const { return state_; }
  // Restores a checkpoint: m and v (any device, f32, shard length) are copied into the
  // optimizer's own buffers, so views of state() stay valid.
  void load_state(const Tensor& m, const Tensor& v, int64_t step);

 private:
  float* shard_pointer(const Tensor& t, const char* what) const;

  AdamWConfig config_;
  std::vector<ParamRange> ranges_;
  std::vector<AdamWRun> runs_;  // maximal runs of the shard with one decay flag, shard indices
  Tensor device_runs_;          // runs_ on the device (cuda only)
  int64_t slab_numel_ = 0;
  int64_t shard_begin_ = 0;
  int64_t shard_end_ = 0;
  Device device_ = Device::cpu;
  AdamWState state_;
};

}  // namespace driftless::optim
