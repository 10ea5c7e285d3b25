// The rotary frequencies of ops::rope, in one place for its CPU body and its CUDA launch, so
// both rotate by the same fp32 angles: HF Llama's
// inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2).float() / dim)), all in fp32.
#pragma once
#include <cmath>
#include <cstdint>
#include <vector>

namespace driftless::ops::detail {

// inv_freq[i] = 1 / theta^(2i / D) for i in [0, D/2): the exponent is rounded to f32 as
// HF's arange / dim is; the power is taken in double and rounded once (the correctly
// rounded f32 power, which torch's and libm's powf give up to their last-bit error).
inline std::vector<float> rope_inv_freq(int64_t d, double theta) {
  std::vector<float> inv(size_t(d / 2));
  const float base = float(theta);
  for (int64_t i = 0; i < d / 2; ++i) {
    const float e = float(2 * i) / float(d);
    inv[size_t(i)] = 1.0f / float(std::pow(double(base), double(e)));
  }
  return inv;
}

}  // namespace driftless::ops::detail
