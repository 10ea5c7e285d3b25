// Every constant of the sm_90a dK/dV kernel with the atomic dQ (bwd_sm90.cu) in one place:
// tile shapes, pipeline stages, the warp roles and their registers, named barriers, and the
// shared-memory layout.
//
// Roles (FlashAttention-3's backward): warpgroup 0 is the producer, whose warp 0 issues the
// TMA loads of K, V and the query steps' Q, dO, lse and delta, and whose warp 1 adds each
// step's dQ to the f32 sums in global memory with TMA reductions; warpgroups 1 and 2 are the
// consumers, each owning 64 keys of the CTA's 128-key tile. One CTA per SM, persistent.
//
// Tiles are TMA boxes (fwd_traits.cuh's layout): a bf16 tile of R rows and D columns is D / 64
// halves of R x 128 bytes; the f32 dQ tile of a step is D / 32 boxes of 64 rows x 128 bytes,
// all with the 128-byte swizzle.
#pragma once
#include "layers/attention/cuda/fast/sm90/fwd_traits.cuh"

namespace driftless::layers::gpu::fast::sm90 {

template <int D>
struct BwdTraits {
  static_assert(D == 64 || D == 128, "head dims 64 and 128");
  static constexpr int kD = D;
  static constexpr int kBlockN = 128;         // keys a work item (a CTA's tile)
  static constexpr int kBlockM = kBwdBlockQ;  // query rows a step
  static constexpr int kConsumers = 2;        // consumer warpgroups, 64 keys each
  static_assert(kBlockN == 64 * kConsumers, "each consumer owns 64 keys");
  static constexpr int kThreads = 128 * (1 + kConsumers);
  static constexpr int kConsumerThreads = 128 * kConsumers;
  static constexpr int kConsumerWarps = 4 * kConsumers;
  // Registers a thread after setmaxnreg: 24 x 128 + 240 x 256 <= 64K. At 224 ptxas
  // serialises the consumers' wgmma (C7512: too few registers); at 24 the producer's item
  // bookkeeping spills a little instead.
  static constexpr int kProducerRegs = 24, kConsumerRegs = 240;
  static constexpr int kStages = 2;  // query steps in flight (Q, dO, lse, delta)
  // A consumer step's queries come in kSplit parts: the element-wise work of one part runs
  // while the tensor cores do the next part's S^T, dP^T (2: m64n32 products, K and V read
  // once a part; 1: m64n64, read once a step: measured level with 2 at head dim 128).
  static constexpr int kSplit = 2;
  static constexpr int kItemSlots = 2;  // items handed from the producer to the other roles
  static constexpr int kHalves = D / 64;
  static constexpr int kDqBoxes = D / 32;         // f32 boxes of 32 columns
  static constexpr int kDqCols = D / kConsumers;  // dQ columns a consumer computes
  static_assert(kDqCols % 32 == 0, "a consumer's dQ columns are whole f32 boxes");

  static constexpr uint32_t kKvBytes = kBlockN * D * 2, kQBytes = kBlockM * D * 2;
  static constexpr uint32_t kDsBytes = kBlockN * kBlockM * 2;  // dS^T (keys x queries) bf16
  static constexpr uint32_t kDqBoxBytes = kBlockM * 128, kDqBytes = kDqBoxes * kDqBoxBytes;
  static constexpr uint32_t kRowBytes = kBlockM * 4;  // lse or delta of a step
  // Byte offsets from the 1024-aligned base of dynamic shared memory.
  static constexpr uint32_t kKOff = 0, kVOff = kKvBytes;
  static constexpr uint32_t kQOff = 2 * kKvBytes;
  static constexpr uint32_t kDOOff = kQOff + kStages * kQBytes;
  static constexpr uint32_t kDsOff = kDOOff + kStages * kQBytes;  // two dS^T buffers
  static constexpr uint32_t kDqOff = kDsOff + 2 * kDsBytes;
  static constexpr uint32_t kLseOff = kDqOff + kDqBytes;
  static constexpr uint32_t kDeltaOff = kLseOff + kStages * kRowBytes;
  static constexpr uint32_t kItemOff = kDeltaOff + kStages * kRowBytes;  // int a slot
  static constexpr uint32_t kBarOff = kItemOff + 8 * ((kItemSlots * 4 + 7) / 8);
  // Barriers (8 bytes each): K/V full / empty, step full / empty per stage, item full /
  // empty per slot.
  static constexpr int kBarriers = 2 + 2 * kStages + 2 * kItemSlots;
  static constexpr int kSmem = int(kBarOff) + kBarriers * 8 + kSmemAlign;
  static_assert(kSmem <= 227 * 1024, "an SM's shared memory");

  // Named barriers (0 is __syncthreads): the consumers' dS^T tile of a step written; the
  // step's dQ tile written (consumers arrive, the dQ warp waits); the dQ tile read by the
  // TMA (the dQ warp arrives, the consumers wait).
  static constexpr uint32_t kDsBarrier = 1, kDqFull = 2, kDqEmpty = 3;
  static constexpr uint32_t kDqThreads = kConsumerThreads + 32;
};

}  // namespace driftless::layers::gpu::fast::sm90
