// Hopper warpgroup matrix products (wgmma.mma_async, sm_90a) for the fast attention kernels.
// A warpgroup (4 warps, 128 threads) computes a 64 x N product; warp w holds rows 16w..16w+15
// of the fp32 accumulator in the same per-warp fragment layout as mma.sync m16n8k16 (n-chunk
// i of 8 columns in d[i][0..3]), and an A operand given in registers has the mma.sync A
// fragment layout. So the element-wise code of the mma.sync kernels runs unchanged on the
// accumulators; only the products change. B (and A, when not in registers) are read straight
// from shared memory through descriptors of fast_common.cuh's 128-byte swizzled tiles.
//
// Compiled only for sm_90a (CUDA_ARCHITECTURES "90a"); DL_WGMMA says when. The host side
// picks these kernels through DRIFTLESS_SM90A (cmake/cuda.cmake) on a compute-9.0 device.
#pragma once
#include "layers/attention/rtc_std.h"

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define DL_WGMMA 1
#endif

namespace driftless::layers::gpu::fast {

// Shared-memory matrix descriptors of a tile in fast_common.cuh's layout (tile_addr): 8-row
// groups of D / 64 atoms, an atom being 8 rows x 64 bf16 (128 B a row) with the 128-byte
// swizzle; the tile 1024-byte aligned. SBO is the stride between 8-row groups (D * 16 bytes),
// LBO the stride between 64-column atoms of an N-major operand (1024 bytes; K-major swizzled
// operands ignore it).
template <int D>
__device__ __forceinline__ uint64_t wg_desc(uint32_t addr) {
  return uint64_t((addr & 0x3FFFF) >> 4) | (uint64_t(1024 >> 4) << 16) |
         (uint64_t((D * 16) >> 4) << 32) | (uint64_t(1) << 62);
}
// The descriptor d of a tile moved `bytes` further on (a multiple of 16; a compile-time
// constant once unrolled): one 64-bit add, no carry out of the 14-bit address field since
// shared addresses stay below 2^18. Every descriptor of a product's k step is its tile's
// plus such an offset (masking and shifting each product's address instead was a sixth of
// the sm_90a dK/dV consumers' instructions).
__device__ __forceinline__ uint64_t desc_at(uint64_t d, uint32_t bytes) {
  return d + uint64_t(bytes >> 4);
}
// K-major operand (the tile's rows are M or N, its columns K): rows from row0 (a multiple of
// 8), k step kd of 16 columns.
template <int D>
__device__ __forceinline__ uint64_t wg_desc_k(uint32_t tile, int kd, int row0 = 0) {
  return desc_at(wg_desc<D>(tile), uint32_t(row0 * D * 2 + (kd >> 2) * 1024 + (kd & 3) * 32));
}
// N-major B operand (the tile's rows are K, its columns N): k step kk of 16 rows.
template <int D>
__device__ __forceinline__ uint64_t wg_desc_n(uint32_t tile, int kk) {
  return desc_at(wg_desc<D>(tile), uint32_t(kk * 2 * (D * 16)));
}

// (Every instruction below is compiled only for sm_90a; elsewhere the W kernels are never
// launched and these are empty.)
__device__ __forceinline__ void wg_fence() {
#ifdef DL_WGMMA
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void wg_commit() {
#ifdef DL_WGMMA
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#endif
}
template <int N>
__device__ __forceinline__ void wg_wait() {
#ifdef DL_WGMMA
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
#endif
}
// Shared memory written through the generic proxy (cp.async, st.shared) made visible to the
// async proxy that wgmma reads with; each thread fences its own writes before the barrier.
__device__ __forceinline__ void fence_proxy_async() {
#ifdef DL_WGMMA
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}
// Keeps the compiler from touching accumulator registers across an asynchronous product.
template <int N>
__device__ __forceinline__ void wg_hold(float (&d)[N][4]) {
#pragma unroll
  for (int i = 0; i < N; ++i)
#pragma unroll
    for (int e = 0; e < 4; ++e) asm volatile("" : "+f"(d[i][e])::"memory");
}

#define DL_WG_R8(a, b, c, d, e, f, g, h) "%" #a ", %" #b ", %" #c ", %" #d ", %" #e ", %" #f ", %" #g ", %" #h
#define DL_WG_REGS32                                                                      \
  DL_WG_R8(0, 1, 2, 3, 4, 5, 6, 7) ", " DL_WG_R8(8, 9, 10, 11, 12, 13, 14, 15) ", "     \
  DL_WG_R8(16, 17, 18, 19, 20, 21, 22, 23) ", " DL_WG_R8(24, 25, 26, 27, 28, 29, 30, 31)
#define DL_WG_REGS64                                                                      \
  DL_WG_REGS32 ", " DL_WG_R8(32, 33, 34, 35, 36, 37, 38, 39) ", "                        \
  DL_WG_R8(40, 41, 42, 43, 44, 45, 46, 47) ", " DL_WG_R8(48, 49, 50, 51, 52, 53, 54, 55) \
  ", " DL_WG_R8(56, 57, 58, 59, 60, 61, 62, 63)
#define DL_WG_REGS16 DL_WG_R8(0, 1, 2, 3, 4, 5, 6, 7) ", " DL_WG_R8(8, 9, 10, 11, 12, 13, 14, 15)
#define DL_WG_D(i) "+f"(d[i][0]), "+f"(d[i][1]), "+f"(d[i][2]), "+f"(d[i][3])
#define DL_WG_D4 DL_WG_D(0), DL_WG_D(1), DL_WG_D(2), DL_WG_D(3)
#define DL_WG_D8 DL_WG_D(0), DL_WG_D(1), DL_WG_D(2), DL_WG_D(3), DL_WG_D(4), DL_WG_D(5), DL_WG_D(6), DL_WG_D(7)
#define DL_WG_D16 DL_WG_D8, DL_WG_D(8), DL_WG_D(9), DL_WG_D(10), DL_WG_D(11), DL_WG_D(12), DL_WG_D(13), DL_WG_D(14), DL_WG_D(15)

// d (64 x N) = A (64 x 16, descriptor da; kTransA 0: K-major, 1: M-major, laid out like an
// N-major B) * B (16 x N, descriptor db; kTransB 0: K-major, 1: N-major) + (acc ? d : 0). acc = 0 on a product's first k step needs no zeroed
// accumulator (zeroing registers between the products of one group makes ptxas serialize).
template <int kTransB, int kTransA = 0>
__device__ __forceinline__ void wgmma_ss(float (&d)[4][4], uint64_t da, uint64_t db, int acc) {
#ifdef DL_WGMMA
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %19, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 {" DL_WG_REGS16
               "}, %16, %17, p, 1, 1, %20, %18;\n}\n"
               : DL_WG_D4
               : "l"(da), "l"(db), "n"(kTransB), "r"(acc), "n"(kTransA));
#endif
}
template <int kTransB, int kTransA = 0>
__device__ __forceinline__ void wgmma_ss(float (&d)[8][4], uint64_t da, uint64_t db, int acc) {
#ifdef DL_WGMMA
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %35, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {" DL_WG_REGS32
               "}, %32, %33, p, 1, 1, %36, %34;\n}\n"
               : DL_WG_D8
               : "l"(da), "l"(db), "n"(kTransB), "r"(acc), "n"(kTransA));
#endif
}
template <int kTransB, int kTransA = 0>
__device__ __forceinline__ void wgmma_ss(float (&d)[16][4], uint64_t da, uint64_t db, int acc) {
#ifdef DL_WGMMA
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %67, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {" DL_WG_REGS64
               "}, %64, %65, p, 1, 1, %68, %66;\n}\n"
               : DL_WG_D16
               : "l"(da), "l"(db), "n"(kTransB), "r"(acc), "n"(kTransA));
#endif
}
// d += A * B with A (64 x 16) from registers: each warp's 16 rows as an mma.sync A fragment.
template <int kTransB>
__device__ __forceinline__ void wgmma_rs(float (&d)[8][4], const uint32_t (&a)[4], uint64_t db) {
#ifdef DL_WGMMA
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {" DL_WG_REGS32
               "}, {%32, %33, %34, %35}, %36, p, 1, 1, %37;\n}\n"
               : DL_WG_D8
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "n"(kTransB));
#endif
}
template <int kTransB>
__device__ __forceinline__ void wgmma_rs(float (&d)[16][4], const uint32_t (&a)[4], uint64_t db) {
#ifdef DL_WGMMA
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {" DL_WG_REGS64
               "}, {%64, %65, %66, %67}, %68, p, 1, 1, %69;\n}\n"
               : DL_WG_D16
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "n"(kTransB));
#endif
}

#undef DL_WG_R8
#undef DL_WG_REGS16
#undef DL_WG_REGS32
#undef DL_WG_REGS64
#undef DL_WG_D
#undef DL_WG_D4
#undef DL_WG_D8
#undef DL_WG_D16

}  // namespace driftless::layers::gpu::fast
