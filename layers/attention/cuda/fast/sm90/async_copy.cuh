// Hopper's asynchronous data movement for the sm_90a attention kernels: mbarriers (arrive,
// expect-tx, parity waits), TMA tile loads (cp.async.bulk.tensor) completing on an mbarrier,
// named barriers between warpgroups and setmaxnreg. Each wrapper is one PTX instruction; all
// of them compile to nothing outside sm_90a (DL_WGMMA, wgmma.cuh), where these kernels never run.
#pragma once
#include "layers/attention/rtc_std.h"

#include "layers/attention/cuda/fast/wgmma.cuh"

namespace driftless::layers::gpu::fast::sm90 {

// A transaction-count barrier in shared memory (mbarrier.*.shared::cta.b64), at its 32-bit
// shared address.
__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
#ifdef DL_WGMMA
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
#endif
}
// Makes the initialisations visible to the async proxy (TMA) and the other threads; a CTA
// barrier must follow.
__device__ __forceinline__ void mbar_init_fence() {
#ifdef DL_WGMMA
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
#endif
}
// One arrival that also expects `bytes` of TMA transactions in the current phase.
__device__ __forceinline__ void mbar_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
#ifdef DL_WGMMA
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes)
               : "memory");
#endif
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
#ifdef DL_WGMMA
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
#endif
}
// An arrival on `bar` once every cp.async the thread issued before it has completed (.noinc:
// it counts against the barrier's expected arrivals, so the count includes it).
__device__ __forceinline__ void cp_async_mbar_arrive(uint32_t bar) {
#ifdef DL_WGMMA
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
#endif
}
// Returns once the phase of parity `parity` has completed (a fresh barrier is in phase 0, so
// waiting for parity 1 returns at once: producers start there on their "empty" barriers).
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
#ifdef DL_WGMMA
  asm volatile(
      "{\n.reg .pred done;\n"
      "WAIT_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT_%=;\n}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
#endif
}

// Box (c0, c1, c2) of a 3-D tensor map (tensor_maps.h) into shared memory at dst, counted
// against bar's expected transactions. Rows outside the tensor arrive as zeros.
__device__ __forceinline__ void tma_load_3d(uint32_t dst, const void* tmap, uint32_t bar, int c0,
                                            int c1, int c2) {
#ifdef DL_WGMMA
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, "
      "{%3, %4, %5}], [%2];\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(tmap)), "r"(bar), "r"(c0), "r"(c1), "r"(c2)
      : "memory");
#endif
}
// Adds the box at src (shared memory, the map's layout) into the map's elements at (c0, c1,
// c2) (an f32 map: element-wise f32 adds in the L2); elements outside the tensor are
// skipped. Tracked by the issuing thread's bulk groups (bulk_commit, bulk_wait_read).
__device__ __forceinline__ void tma_reduce_add_3d(const void* tmap, uint32_t src, int c0, int c1,
                                                  int c2) {
#ifdef DL_WGMMA
  asm volatile(
      "cp.reduce.async.bulk.tensor.3d.global.shared::cta.add.tile.bulk_group [%0, {%2, %3, %4}], "
      "[%1];\n" ::"l"(reinterpret_cast<uint64_t>(tmap)),
      "r"(src), "r"(c0), "r"(c1), "r"(c2)
      : "memory");
#endif
}
__device__ __forceinline__ void bulk_commit() {
#ifdef DL_WGMMA
  asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
#endif
}
// Returns once at most N of the thread's bulk groups still read their shared memory.
template <int N>
__device__ __forceinline__ void bulk_wait_read() {
#ifdef DL_WGMMA
  asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(N) : "memory");
#endif
}
// Returns once at most N of the thread's bulk groups are incomplete (their writes done).
template <int N>
__device__ __forceinline__ void bulk_wait() {
#ifdef DL_WGMMA
  asm volatile("cp.async.bulk.wait_group %0;\n" ::"n"(N) : "memory");
#endif
}
// A counter in global memory that orders the TMA reductions of several CTAs (the ordered dQ):
// wait_counter returns once *c reaches `value` (acquire at GPU scope, then a proxy fence so the
// thread's next bulk operations come after what the acquire made visible); bump_counter, once
// the thread's bulk groups are complete (bulk_wait<0>), makes their writes visible to the
// next waiter (proxy fence, then a release add). A wait of some seconds (2^22 polls of an L2
// load and a short sleep; the waits the schedule allows take micro- to milliseconds) traps: a
// schedule that waits on a tile never taken fails the launch instead of hanging the device.
__device__ __forceinline__ void wait_counter(const int* c, int value) {
#ifdef DL_WGMMA
  int v = 0;
  for (uint32_t polls = 0;; ++polls) {
    asm volatile("ld.acquire.gpu.global.b32 %0, [%1];\n" : "=r"(v) : "l"(c) : "memory");
    if (v >= value) break;
    if (polls == (1u << 22)) __trap();
    __nanosleep(32);
  }
  asm volatile("fence.proxy.async.global;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void bump_counter(int* c) {
#ifdef DL_WGMMA
  asm volatile("fence.proxy.async.global;\n" ::: "memory");
  asm volatile("red.release.gpu.global.add.s32 [%0], 1;\n" ::"l"(c) : "memory");
#endif
}
// Fetches a tensor map's 128-byte descriptor into the cache ahead of its first use.
__device__ __forceinline__ void tma_prefetch_map(const void* tmap) {
#ifdef DL_WGMMA
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(tmap)) : "memory");
#endif
}

// Named barriers (ids 1..15; 0 is __syncthreads): `threads` counts every thread that syncs
// or arrives in one phase.
__device__ __forceinline__ void named_sync(uint32_t id, uint32_t threads) {
#ifdef DL_WGMMA
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
#endif
}
__device__ __forceinline__ void named_arrive(uint32_t id, uint32_t threads) {
#ifdef DL_WGMMA
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
#endif
}

// Moves registers between the warpgroups of a CTA (every warp of a warpgroup executes it).
template <int N>
__device__ __forceinline__ void regs_dec() {
#ifdef DL_WGMMA
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N));
#endif
}
template <int N>
__device__ __forceinline__ void regs_inc() {
#ifdef DL_WGMMA
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N));
#endif
}

// Stage index and phase parity of a ring of kStages buffers, advanced in the same order by
// the producer and by the consumers.
template <int kStages>
struct PipeState {
  int stage = 0;
  uint32_t phase = 0;
  __device__ __forceinline__ void advance() {
    if (++stage == kStages) stage = 0, phase ^= 1u;
  }
};

}  // namespace driftless::layers::gpu::fast::sm90
