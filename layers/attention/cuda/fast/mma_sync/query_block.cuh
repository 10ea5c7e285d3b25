// The per-block setup of the fast kernels that take one query block a CTA (the mma.sync
// forward, forward_kernel.cuh, and the dQ kernel, fast_dq.cuh): which head, document and
// rows the block holds, the keys its first and last rows see, the key tiles that cover
// them, and the rows' first elements of q, k and v. A device-only header, also compiled by
// NVRTC (layers/attention/jit/).
#pragma once
#include "layers/attention/cuda/fast/fast_common.cuh"

namespace driftless::layers::gpu::fast {

struct QueryBlock {
  int h, kh;  // query head; its kv head
  Tile tile;
  Doc doc;
  int q_len, k_len, i0, nq;  // the document's rows i0 .. i0 + nq - 1
  // Visible keys of the first and last row (lo and hi never decrease with the row).
  int lo_first, hi_first, lo_last, hi_last;
  int j_begin, n_tiles;  // key tiles of kBK keys from j_begin (a mask expression narrows them)
  const bf16 *qg, *kg, *vg;  // q of row i0 and head h; k, v of the document's first key, kh
};

// Block blockIdx.x of a grid of tiles x heads (heads innermost): up to kRows query rows of
// tiles[blockIdx.x / H], head blockIdx.x % H, over key tiles of kBK keys.
template <int kRows, int kBK, int D, class M>
__device__ __forceinline__ QueryBlock query_block(const Problem& p, const Tile* tiles) {
  QueryBlock b;
  const int64_t H = p.heads, Hkv = p.kv_heads, QH = q_heads(p), KH = k_heads(p), VH = v_heads(p);
  b.h = int(blockIdx.x % H);
  b.tile = tiles[blockIdx.x / H];
  b.kh = int(b.h / (H / Hkv));
  b.doc = p.docs[b.tile.doc];
  b.q_len = int(b.doc.q_len), b.k_len = int(b.doc.k_len), b.i0 = b.tile.start;
  b.nq = min(kRows, b.q_len - b.i0);
  row_keys(p, b.doc, b.i0, &b.lo_first, &b.hi_first);
  row_keys(p, b.doc, b.i0 + b.nq - 1, &b.lo_last, &b.hi_last);
  b.qg = static_cast<const bf16*>(p.q) + ((b.doc.q_offset + b.i0) * QH + b.h) * D;
  b.kg = static_cast<const bf16*>(p.k) + (b.doc.k_offset * KH + b.kh) * D;
  b.vg = static_cast<const bf16*>(p.v) + (b.doc.k_offset * VH + b.kh) * D;
  b.j_begin = b.lo_first > 0 ? (b.lo_first / kBK) * kBK : 0;
  b.n_tiles = b.hi_last >= b.lo_first ? (b.hi_last - b.j_begin) / kBK + 1 : 0;
  if constexpr (NarrowsTiles<M>::value)
    narrow_blocks(b.tile, kBK, &b.j_begin, &b.n_tiles);  // the keys a mask leaves the tile
  return b;
}

}  // namespace driftless::layers::gpu::fast
