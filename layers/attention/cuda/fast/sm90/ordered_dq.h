// The ordered dQ's count (bwd_mainloop.cuh bwd_write_dq, the deterministic backward on the
// sm_90a kernel): how many key tiles add to a block of query rows before a given tile does.
// Host and device, so the host tests hold it against the kernels' query steps.
#pragma once
#include "layers/attention/host_device.h"
#include "layers/attention/mask.h"

namespace driftless::layers::gpu::fast::sm90 {

// Key tiles of kBlockN keys of a document of q_len queries and k_len keys; query blocks of
// kBlockM rows on the document's grid (sm90::ordered_dq_fits). The tiles listed from the top
// down (k_tiles_by_head_descending) add to the block of rows q0 .. q0 + kBlockM - 1 in that
// order: before tile j0 / kBlockN come the tiles above it whose first query row
// (bwd_step.cuh query_steps's first_row) is at most the block's last row, up to the
// document's last tile (each such tile's steps reach the block: their last rows are no
// earlier than tile j0's). window_right as the mask takes it (-1: none).
template <int kBlockM, int kBlockN>
DL_HOST_DEVICE inline int ordered_dq_before(int q_len, int k_len, bool causal,
                                            int64_t window_right, int j0, int q0) {
  const int shift = k_len - q_len;
  const int wr = window_in_32_bits(window_right, q_len, k_len);
  const int last_row = (q0 + kBlockM < q_len ? q0 + kBlockM : q_len) - 1;
  int last_tile = (k_len - 1) / kBlockN;
  if (causal) {
    const int t = (last_row + shift) / kBlockN;
    last_tile = t < last_tile ? t : last_tile;
  }
  if (wr >= 0) {
    const int t = (last_row + wr + shift) / kBlockN;
    last_tile = t < last_tile ? t : last_tile;
  }
  return last_tile - j0 / kBlockN;
}

}  // namespace driftless::layers::gpu::fast::sm90
