// Launcher of the sm_90a attention forward (fwd_sm90.cu), taken by fast::forward on Hopper
// (use_wgmma()): same problem, modifier and tile schedule as the mma.sync kernel; p has its
// row strides filled in (with_row_strides) and padded rows are already written.
#pragma once
#include "layers/attention/cuda/fast/fast_attention.h"

namespace driftless::layers::gpu::fast::sm90 {

void forward(const Problem& p, const Mod& mod, const Tile* tiles, int n_tiles, void* out,
             float* lse);
// The same with the kernel launched by `launch` (fast_attention.h forward_with).
void forward_with(const Problem& p, const ModLauncher& launch, const Tile* tiles, int n_tiles,
                  void* out, float* lse);

}  // namespace driftless::layers::gpu::fast::sm90
