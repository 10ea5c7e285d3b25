// The drift metric of ARCHITECTURE.md "Drift metric", in one place: for reference r and test t,
// rms = sqrt(mean((t-r)^2)), scale = sqrt(mean(r^2) + eps^2), rms_rel = rms / scale,
// max_rel = max|t-r| / scale.
#pragma once
#include "engine/core/tensor.h"

namespace driftless::train {

struct Drift {
  double rms = 0, scale = 0, rms_rel = 0, max_rel = 0;
  bool finite = true;  // false when t holds NaN/inf where r does not
};

Drift drift(const Tensor& reference, const Tensor& test, double eps);

}  // namespace driftless::train
