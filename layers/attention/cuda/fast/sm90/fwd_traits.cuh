// Every constant of the sm_90a attention forward (fwd_sm90.cu) in one place: tile shapes,
// pipeline stages, the warp roles and their registers, the shared-memory layout, and the
// matrix descriptors of that layout.
//
// Roles: warpgroup 0 is the producer (its warp 0 issues the TMA loads; setmaxnreg gives its
// registers away), warpgroups 1 and 2 are consumers, each owning 64 query rows of the CTA's
// 128-row tile and running its products on wgmma. One CTA per SM, persistent.
//
// Shared-memory tiles are TMA boxes of 64 bf16 columns (128 bytes, the 128-byte swizzle's
// row): a tile of R rows and D columns is D / 64 "halves" of R x 128 bytes, one after the
// other, each 1024-byte aligned; the 16-byte chunk c of row r of a half sits at chunk
// c ^ (r % 8) of the row.
#pragma once
#include "layers/attention/rtc_std.h"

#include "layers/attention/cuda/fast/fast_common.cuh"
#include "layers/attention/cuda/fast/wgmma.cuh"

namespace driftless::layers::gpu::fast::sm90 {

template <int D, int kStages = 2, bool kPingPong = true>
struct FwdTraits {
  static_assert(D == 64 || D == 128, "head dims 64 and 128");
  static constexpr int kD = D;
  // The consumers take turns issuing their products (named barriers kSchedBarrier + c).
  static constexpr bool kPingpong = kPingPong;
  static constexpr int kBlockM = kFwdBlockQ;  // query rows a CTA's work item covers
  static constexpr int kBlockN = 128;         // keys per K/V tile
  static constexpr int kConsumers = 2;        // consumer warpgroups, kBlockM / 64 rows each
  static_assert(kBlockM == 64 * kConsumers, "each consumer owns 64 rows");
  static constexpr int kThreads = 128 * (1 + kConsumers);
  static constexpr int kConsumerWarps = 4 * kConsumers;
  // Registers a thread after setmaxnreg: 24 x 128 + 240 x 256 <= 64K.
  static constexpr int kProducerRegs = 24, kConsumerRegs = 240;
  // The next item's Q loads while this one finishes, where shared memory allows.
  static constexpr int kQStages = D == 128 && kStages > 2 ? 1 : 2;
  static constexpr int kKvStages = kStages;  // K and V tiles in flight, each its own ring
  static constexpr int kHalves = D / 64;

  static constexpr uint32_t kQBytes = kBlockM * D * 2, kKvBytes = kBlockN * D * 2;
  // Byte offsets from the 1024-aligned base of dynamic shared memory.
  static constexpr uint32_t kQOff = 0;
  static constexpr uint32_t kKOff = kQOff + kQStages * kQBytes;
  static constexpr uint32_t kVOff = kKOff + kKvStages * kKvBytes;
  static constexpr uint32_t kBarOff = kVOff + kKvStages * kKvBytes;
  // Barriers (8 bytes each): q full / empty, k full / empty, v full / empty per stage.
  static constexpr int kBarriers = 2 * kQStages + 4 * kKvStages;
  static constexpr uint32_t kSmem = kBarOff + kBarriers * 8 + kSmemAlign;
  static_assert(kSmem <= 227 * 1024, "an SM's shared memory");

  // Named barriers of the consumers' ping-pong (ids 1 and 2; 0 is __syncthreads).
  static constexpr uint32_t kSchedBarrier = 1;
};

// The configuration per head dim and modifier, measured on an H200 (BENCHMARKS.md): at
// D = 128 the ping-pong pays; at D = 64, where the softmax costs as much as the products, and
// with softcap's tanh everywhere, the consumers run free and a third K/V stage pays.
template <int D, class M>
using FwdConfig = FwdTraits<D, D == 64 ? 3 : 2, D == 128 && !HeavyMod<M>::value>;

// Address of the 16-byte chunk c (of D / 8) of row r in a tile of `rows` rows (layout above).
__device__ __forceinline__ uint32_t chunk_addr(uint32_t tile, int rows, int r, int c) {
  return tile + uint32_t((c >> 3) * rows * 128 + r * 128 + (((c & 7) ^ (r & 7)) << 4));
}

// Rows [0, n_valid) of a (rows, ld) bf16 global matrix into a tile of kRows rows x D (layout
// above) by one warp, rows past n_valid zero-filled: the partial tiles at a document's end,
// which a TMA box would fill with the next rows of the tensor (a sequence's padding may hold
// anything, and 0 x NaN is not 0). The caller makes the writes visible to the async proxy.
template <int kRows, int D>
__device__ __forceinline__ void load_rows_zero_filled(uint32_t dst, const bf16* src, int64_t ld,
                                                      int n_valid, int lane) {
  constexpr int kChunks = D / 8;
  for (int i = lane; i < kRows * kChunks; i += 32) {
    const int r = i / kChunks, c = i % kChunks;
    uint4 x = make_uint4(0, 0, 0, 0);
    if (r < n_valid) x = *reinterpret_cast<const uint4*>(src + r * ld + c * 8);
    asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"r"(chunk_addr(dst, kRows, r, c)),
                 "r"(x.x), "r"(x.y), "r"(x.z), "r"(x.w)
                 : "memory");
  }
}

// wgmma shared-memory descriptor with the 128-byte swizzle: lbo / sbo in bytes.
__device__ __forceinline__ uint64_t sw128_desc(uint32_t addr, uint32_t lbo, uint32_t sbo) {
  return uint64_t((addr & 0x3FFFF) >> 4) | (uint64_t(lbo >> 4) << 16) | (uint64_t(sbo >> 4) << 32) |
         (uint64_t(1) << 62);
}
// K-major operand (the tile's rows are M or N, its columns K): rows row0.. (a multiple of 8),
// k step kd of 16 columns; 8-row groups 1024 bytes apart.
__device__ __forceinline__ uint64_t desc_k_major(uint32_t tile, int rows, int kd, int row0 = 0) {
  return desc_at(sw128_desc(tile, 16, 1024),
                 uint32_t((kd >> 2) * rows * 128 + row0 * 128 + (kd & 3) * 32));
}
// MN-major B operand (the tile's rows are K, its columns N): k step kk of 16 rows; the
// 64-column halves (along N) rows * 128 bytes apart, 8-row groups (along K) 1024.
__device__ __forceinline__ uint64_t desc_mn_major(uint32_t tile, int rows, int kk) {
  return desc_at(sw128_desc(tile, uint32_t(rows * 128), 1024), uint32_t(kk * 2048));
}

}  // namespace driftless::layers::gpu::fast::sm90
