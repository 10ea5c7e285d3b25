// See schedule.h.
#include "engine/optim/schedule.h"

#include <cmath>
#include <numbers>

#include "engine/core/error.h"

namespace driftless::optim {

LrDecay lr_decay_from_name(const std::string& name) {
  if (name == "cosine") return LrDecay::cosine;
  if (name == "linear") return LrDecay::linear;
  if (name == "constant") return LrDecay::constant;
  DL_FAIL("lr_schedule", "expected decay cosine, linear or constant, got \"" << name << "\"");
}

void validate(const LrSchedule& s) {
  DL_CHECK(s.min_lr >= 0 && s.min_lr <= s.max_lr, "lr_schedule",
           "expected 0 <= min_lr <= max_lr, got min_lr " << s.min_lr << ", max_lr " << s.max_lr);
  DL_CHECK(s.warmup_steps >= 0 && s.warmup_steps <= s.total_steps, "lr_schedule",
           "expected 0 <= warmup_steps <= total_steps, got warmup_steps "
               << s.warmup_steps << ", total_steps " << s.total_steps);
}

double learning_rate(const LrSchedule& s, int64_t step) {
  validate(s);
  DL_CHECK(step >= 0, "lr_schedule", "expected step >= 0, got " << step);
  if (step < s.warmup_steps) return s.max_lr * double(step + 1) / double(s.warmup_steps);
  if (s.decay == LrDecay::constant) return s.max_lr;
  if (step >= s.total_steps) return s.min_lr;
  const double r = double(step - s.warmup_steps) / double(s.total_steps - s.warmup_steps);
  if (s.decay == LrDecay::linear) return s.max_lr - (s.max_lr - s.min_lr) * r;
  return s.min_lr + (s.max_lr - s.min_lr) * 0.5 * (1.0 + std::cos(std::numbers::pi * r));
}

}  // namespace driftless::optim
