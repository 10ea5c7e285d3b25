// Launcher of the rotary embedding kernel (rope.cu). Plain pointers and a POD table: nvcc
// compiles this header as C++17. Default stream.
#pragma once
#include <cstdint>

#include "engine/core/dtype.h"
#include "engine/ops/cuda/entry.h"

namespace driftless::ops::gpu {

// Rotary frequencies by value in the launch (no copy to the device): head dims up to
// 2 * kRopeMaxHalf.
constexpr int kRopeMaxHalf = 256;
struct RopeFreqs {
  float inv_freq[kRopeMaxHalf] = {};
};
// Rows of w elements, the first `rotated` heads of d turned by f32(positions[r]) *
// inv_freq[i] (the opposite angle when inverse), the rest copied.
DL_CUDA_ENTRY(void launch_rope(DType dtype, const void* x, const int32_t* positions, void* out,
                               int64_t rows, int64_t w, int64_t rotated, int64_t d,
                               const RopeFreqs& freqs, bool inverse))

}  // namespace driftless::ops::gpu
