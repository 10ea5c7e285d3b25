// Launchers of the fast varlen attention (FlashAttention-2 style, bf16 tensor cores through
// mma.sync m16n8k16 + ldmatrix, fp32 accumulation): forward (fast_forward.cu) and a fused,
// deterministic backward (fast_backward.cu). Same contract as flash_cuda.h (which
// stays the fallback): bottom-right causal, windows, GQA without replication, padding written
// as zeros, LSE (H, T_q) fp32, modifiers none/softcap/ALiBi as compile-time functors.
// Plain pointers and POD structs only (nvcc compiles this as C++17).
#pragma once
#include <cstdint>
#include <vector>

#include "layers/attention/cuda/flash_cuda.h"

namespace driftless::layers::gpu::fast {

// Tile sizes the host schedule must be built with.
constexpr int kFwdBlockQ = 128;  // query rows per forward CTA (4 warps x 32 rows)
constexpr int kBwdBlockQ = 64;   // query rows per backward step (aligned within a document)
constexpr int kBwdBlockK = 64;   // key rows per backward CTA (4 warps x 16 rows)

// One unit of work: `start` is a row offset inside document `doc` (q rows for the forward,
// k rows for the backward).
struct Tile {
  int32_t doc, start;
};

// True when the fast kernels take this call: bf16, head_dim 64 or 128.
bool supported(const Problem& p, const Mod& mod);

// Host schedule (schedule.cpp): the tiles of every document, heaviest first (more visible
// keys, or queries, per tile), so the long causal tiles start early. k_tiles keeps each
// document's tiles in ascending order (the backward's dQ order relies on it).
std::vector<Tile> q_tiles(const Problem& p, const std::vector<Doc>& docs, int block_q);
std::vector<Tile> k_tiles(const Problem& p, const std::vector<Doc>& docs, int block_k);

// tiles: device arrays. `padded`: some q (or k) rows belong to no document; those are
// zero-filled first (out 0, lse -inf; dq/dk/dv 0). Every launch goes to the default stream.
void forward(const Problem& p, const Mod& mod, const Tile* tiles, int n_tiles, bool padded,
             void* out, float* lse);
// Scratch of the backward: delta (H * T_q) f32, dq_acc (T_q * H * D) f32 and n_sem int32
// semaphores, n_sem = dq_semaphores(p, number of documents). All are (re)initialised here.
int64_t dq_semaphores(const Problem& p, int64_t n_docs);
void backward(const Problem& p, const Mod& mod, const Tile* k_tiles, int n_k_tiles, bool k_padded,
              const void* out, const void* dout, const float* lse, float* delta, float* dq_acc,
              int* sem, int64_t n_sem, void* dq, void* dk, void* dv);

}  // namespace driftless::layers::gpu::fast
