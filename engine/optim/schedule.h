// Learning-rate schedule: linear warm-up, then cosine or linear decay to min_lr, as a
// pure function of the step, so a resumed run gets the same lr from the step alone.
#pragma once
#include <cstdint>
#include <string>

namespace driftless::optim {

enum class LrDecay { cosine, linear, constant };

// "cosine", "linear" or "constant"; throws Error naming the value otherwise.
LrDecay lr_decay_from_name(const std::string& name);

struct LrSchedule {
  double max_lr = 6e-4;
  double min_lr = 0.0;
  int64_t warmup_steps = 0;  // steps [0, warmup_steps) ramp up linearly
  int64_t total_steps = 1;   // decay ends here; min_lr from this step on
  LrDecay decay = LrDecay::cosine;
};

// Throws Error unless 0 <= min_lr <= max_lr and 0 <= warmup_steps <= total_steps.
void validate(const LrSchedule& s);

// The lr of the update at 0-based step `step` (the number of updates done before it):
//   step < warmup_steps:          max_lr * (step + 1) / warmup_steps   (never 0)
//   warmup_steps <= step < total: r = (step - warmup) / (total - warmup) in [0, 1),
//       cosine:   min_lr + (max_lr - min_lr) * (1 + cos(pi r)) / 2
//       linear:   max_lr - (max_lr - min_lr) * r
//       constant: max_lr
//   step >= total_steps:          min_lr (max_lr for constant)
double learning_rate(const LrSchedule& s, int64_t step);

}  // namespace driftless::optim
