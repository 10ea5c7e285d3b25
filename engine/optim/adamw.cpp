// See adamw.h. The update arithmetic lives in adamw_kernel.h's backends; this file checks
// arguments, splits the shard into runs of equal decay flag and calls the dispatch point.
#include "engine/optim/adamw.h"

#include <cmath>

#include "engine/optim/adamw_kernel.h"

namespace driftless::optim {

namespace {
constexpr const char* kOp = "adamw";
}

void adamw_update(Device device, const AdamWKernelArgs& args, const std::vector<AdamWRun>& runs,
                  const Tensor& device_runs) {
  switch (device) {
    case Device::cpu:
      for (const AdamWRun& r : runs) {
        AdamWKernelArgs a = args;
        a.params += r.offset;
        a.grads += r.offset;
        a.m += r.offset;
        a.v += r.offset;
        if (a.compute) a.compute += r.offset;
        a.n = r.n;
        if (!r.decay) a.weight_decay = 0.0f;
        adamw_update_cpu(a);
      }
      return;
    case Device::cuda:
      if (runs.empty()) return;
      DL_CHECK(device_runs.defined() && device_runs.device() == Device::cuda &&
                   device_runs.numel() == int64_t(4 * runs.size()),
               kOp, "the run table on the device does not match the runs");
      return adamw_update_cuda(
          args, static_cast<const AdamWRun*>(device_runs.raw_data()), int64_t(runs.size()),
          runs.back().chunk_begin + (runs.back().n + kAdamWChunk - 1) / kAdamWChunk);
  }
  DL_FAIL(kOp, "expected parameters on cpu or cuda");
}

AdamW::AdamW(const AdamWConfig& config, std::vector<ParamRange> ranges, int64_t slab_numel,
             Device device)
    : AdamW(config, std::move(ranges), slab_numel, 0, slab_numel, device) {}

AdamW::AdamW(const AdamWConfig& config, std::vector<ParamRange> ranges, int64_t slab_numel,
             int64_t shard_begin, int64_t shard_end, Device device)
    : config_(config),
      ranges_(std::move(ranges)),
      slab_numel_(slab_numel),
      shard_begin_(shard_begin),
      shard_end_(shard_end),
      device_(device) {
  DL_CHECK(config.beta1 >= 0 && config.beta1 < 1 && config.beta2 >= 0 && config.beta2 < 1, kOp,
           "expected betas in [0, 1), got beta1 " << config.beta1 << ", beta2 " << config.beta2);
  DL_CHECK(config.eps > 0, kOp, "expected eps > 0, got " << config.eps);
  DL_CHECK(config.weight_decay >= 0, kOp,
           "expected weight_decay >= 0, got " << config.weight_decay);
  DL_CHECK(config.lr >= 0, kOp, "expected lr >= 0, got " << config.lr);
  DL_CHECK(slab_numel >= 0, kOp, "expected slab_numel >= 0, got " << slab_numel);
  DL_CHECK(0 <= shard_begin && shard_begin <= shard_end && shard_end <= slab_numel, kOp,
           "expected a shard inside [0, " << slab_numel << "), got [" << shard_begin << ", "
                                          << shard_end << ")");
  int64_t prev_end = 0;
  for (size_t i = 0; i < ranges_.size(); ++i) {
    const ParamRange& r = ranges_[i];
    DL_CHECK(r.begin <= r.end && r.end <= slab_numel, kOp,
             "range " << i << " \"" << r.name << "\" [" << r.begin << ", " << r.end
                      << ") expected inside the slab [0, " << slab_numel << ")");
    DL_CHECK(r.begin >= prev_end, kOp,
             "ranges expected sorted and disjoint, got range "
                 << i << " \"" << r.name << "\" starting at " << r.begin
                 << " before the previous end " << prev_end);
    prev_end = r.end;
    const int64_t b = std::max(r.begin, shard_begin), e = std::min(r.end, shard_end);
    if (b >= e) continue;
    const int64_t off = b - shard_begin, decay = r.weight_decay ? 1 : 0;
    if (!runs_.empty() && runs_.back().offset + runs_.back().n == off && runs_.back().decay == decay)
      runs_.back().n += e - b;
    else
      runs_.push_back({off, e - b, 0, decay});
  }
  // Each run's first block of the cuda launch, and the table that launch reads.
  int64_t chunks = 0;
  std::vector<int64_t> table;  // the runs as i64 x 4 (AdamWRun)
  for (AdamWRun& k : runs_) {
    k.chunk_begin = chunks;
    chunks += (k.n + kAdamWChunk - 1) / kAdamWChunk;
    table.insert(table.end(), {k.offset, k.n, k.chunk_begin, k.decay});
  }
  static_assert(sizeof(AdamWRun) == 4 * sizeof(int64_t), "AdamWRun is four i64");
  if (device == Device::cuda && !table.empty())
    device_runs_ = Tensor::from_vector(table).to(Device::cuda);
  const int64_t n = shard_end - shard_begin;
  state_.m = Tensor::zeros({n}, DType::f32, device);
  state_.v = Tensor::zeros({n}, DType::f32, device);
  state_.step = 0;
}

float* AdamW::shard_pointer(const Tensor& t, const char* what) const {
  const int64_t shard = shard_end_ - shard_begin_;
  DL_CHECK(
      t.defined() && t.dtype() == DType::f32 && t.dim() == 1 && t.is_contiguous() &&
          t.device() == device_,
      kOp,
      "expected " << what << " as a 1-D contiguous f32 tensor on " << device_name(device_)
                  << ", got "
                  << (t.defined() ? std::string(dtype_name(t.dtype())) + " " +
                                        shape_str(t.shape()) + " on " + device_name(t.device()) +
                                        (t.is_contiguous() ? "" : " (non-contiguous)")
                                  : std::string("an undefined tensor")));
  if (t.numel() == slab_numel_) return t.data<float>() + shard_begin_;
  DL_CHECK(t.numel() == shard, kOp,
           "expected " << what << " of " << slab_numel_ << " elements (the slab) or " << shard
                       << " (the shard [" << shard_begin_ << ", " << shard_end_ << ")), got "
                       << t.numel());
  return t.data<float>();
}

void AdamW::step(const Tensor& params, const Tensor& grads, double lr, double grad_scale,
                 const Tensor& compute) {
  DL_CHECK(std::isfinite(lr) && lr >= 0, kOp, "expected a finite lr >= 0, got " << lr);
  float* p = shard_pointer(params, "params");
  const float* g = shard_pointer(grads, "grads");
  uint16_t* c = nullptr;
  if (compute.defined()) {
    DL_CHECK(compute.dtype() == DType::bf16 && compute.dim() == 1 && compute.is_contiguous() &&
                 compute.device() == device_ && compute.numel() == params.numel(),
             kOp, "expected compute as 1-D contiguous bf16 of the params' " << params.numel()
                      << " elements on " << device_name(device_));
    c = static_cast<uint16_t*>(compute.raw_data()) +
        (compute.numel() == slab_numel_ ? shard_begin_ : 0);
  }
  const int64_t t = state_.step + 1;
  AdamWKernelArgs args;
  args.lr = float(lr);
  args.beta1 = float(config_.beta1);
  args.beta2 = float(config_.beta2);
  args.eps = float(config_.eps);
  args.one_minus_beta1 = float(1.0 - config_.beta1);
  args.one_minus_beta2 = float(1.0 - config_.beta2);
  args.bias_correction1 = float(1.0 - std::pow(config_.beta1, double(t)));
  args.bias_correction2 = float(1.0 - std::pow(config_.beta2, double(t)));
  args.grad_scale = float(grad_scale);
  args.params = p;
  args.grads = g;
  args.m = state_.m.data<float>();
  args.v = state_.v.data<float>();
  args.compute = c;
  args.n = shard_end_ - shard_begin_;
  args.weight_decay = float(config_.weight_decay);
  adamw_update(device_, args, runs_, device_runs_);
  state_.step = t;
}

void AdamW::load_state(const Tensor& m, const Tensor& v, int64_t step) {
  const int64_t n = shard_end_ - shard_begin_;
  for (const Tensor* t : {&m, &v}) {
    DL_CHECK(t->defined() && t->dtype() == DType::f32 && t->shape() == Shape{n}, kOp,
             "load_state expected " << (t == &m ? "m" : "v") << " as f32 [" << n << "], got "
                                    << (t->defined() ? std::string(dtype_name(t->dtype())) + " " +
                                                           shape_str(t->shape())
                                                     : std::string("an undefined tensor")));
  }
  DL_CHECK(step >= 0, kOp, "load_state expected step >= 0, got " << step);
  state_.m.copy_(m);
  state_.v.copy_(v);
  state_.step = step;
}

}  // namespace driftless::optim
