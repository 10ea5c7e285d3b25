// TMA tensor maps (CUtensorMap, 128 bytes) of the rows the sm_90a attention kernels read,
// encoded on the host once per call through the driver's cuTensorMapEncodeTiled (fetched from
// the runtime, so nothing links libcuda). Plain types only: nvcc and the host compiler both
// include this.
#pragma once
#include <cstdint>

namespace driftless::layers::gpu::fast::sm90 {

// A bf16 tensor of `rows` rows, each `row_heads` heads of head_dim elements (of which the
// first `heads` are addressed), as a 3-D map (head_dim, heads, rows) read in boxes of
// 64 x 1 x box_rows with the 128-byte swizzle (fwd_traits.cuh's tile layout). Rows past the
// end read as zeros. Throws driftless::Error where the driver refuses the map.
void encode_rows_map(void* map128, const void* base, int64_t rows, int64_t heads, int64_t row_heads,
                     int64_t head_dim, int box_rows);

// A packed f32 tensor (rows, heads, head_dim) as the same 3-D map, in boxes of 32 x 1 x
// box_rows (128 bytes a row, the 128-byte swizzle): the atomic dQ's sums, which the dK/dV
// kernel adds to with TMA reductions.
void encode_f32_rows_map(void* map128, const void* base, int64_t rows, int64_t heads,
                         int64_t head_dim, int box_rows);

// Streaming multiprocessors of the current device (read once).
int sm_count();

}  // namespace driftless::layers::gpu::fast::sm90
