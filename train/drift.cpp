// Drift metric (drift.h), accumulated in double.
#include "train/drift.h"

#include <algorithm>
#include <cmath>

namespace driftless::train {

Drift drift(const Tensor& reference, const Tensor& test, double eps) {
  DL_CHECK(reference.shape() == test.shape(), "drift",
           "reference " << shape_str(reference.shape()) << " and test "
                        << shape_str(test.shape()) << " differ in shape");
  const auto r = reference.to_vector<double>();
  const auto t = test.to_vector<double>();
  double sq = 0, ref_sq = 0, max_abs = 0;
  Drift d;
  for (size_t i = 0; i < r.size(); ++i) {
    const double diff = t[i] - r[i];
    if (!std::isfinite(t[i]) && std::isfinite(r[i])) d.finite = false;
    sq += diff * diff;
    ref_sq += r[i] * r[i];
    max_abs = std::max(max_abs, std::abs(diff));
  }
  const double n = std::max<double>(1, double(r.size()));
  d.rms = std::sqrt(sq / n);
  d.scale = std::sqrt(ref_sq / n + eps * eps);
  d.rms_rel = d.rms / d.scale;
  d.max_rel = max_abs / d.scale;
  if (!d.finite) d.rms_rel = d.max_rel = std::numeric_limits<double>::infinity();
  return d;
}

}  // namespace driftless::train
