// Work items of the persistent sm_90a attention kernels and their varlen bookkeeping. An item
// is (query tile of the host schedule, head); the host schedule lists tiles heaviest first
// (schedule.cpp), and item w is tile w / H, head w % H, so the heads of one tile, which share
// a K/V head under GQA, run side by side. The items come in bands of `grid`, one item a CTA
// per band, the bands walked in a snake: CTA b takes item b of even bands and item
// grid - 1 - b of odd ones, so the CTA that took a band's heaviest item takes the next
// band's lightest (round-robin gave CTA 0 the heaviest of every band). Every role of a CTA
// walks the same sequence without talking to the others.
#pragma once
#include "layers/attention/rtc_std.h"

#include "layers/attention/cuda/fast/fast_common.cuh"

namespace driftless::layers::gpu::fast::sm90 {

struct StaticScheduler {
  int n_items;
  __device__ __forceinline__ int first() const { return int(blockIdx.x); }
  __device__ __forceinline__ int next(int w) const {
    const int grid = int(gridDim.x), band = w / grid + 1, b = int(blockIdx.x);
    return band * grid + ((band & 1) ? grid - 1 - b : b);
  }
  __device__ __forceinline__ bool valid(int w) const { return w < n_items; }
};

// The rows and key tiles of one item: query rows [i0, i0 + nq) of document `doc`, head h
// (K/V head kh), key tiles j_begin + t * kBlockN for t < n_tiles (those some row of the item
// sees). lo / hi: the visible key range of the item's first and last rows (both bounds
// never decrease with the row), which tell the tiles every row sees whole. The key tiles
// are narrowed to the schedule tile's [lo, hi) (Tile, narrow_blocks), and its [vis_lo,
// vis_hi) tells the key tiles a mask expression shows whole.
struct ItemInfo {
  Doc doc;
  int h, kh, i0, nq, j_begin, n_tiles;
  int doc_index;  // the document within the call (Tile::doc), for the modifier
  int lo_first, hi_first, lo_last, hi_last;
  int vis_lo = 0, vis_hi = 0;  // the tile's visible range (Tile; set where kNarrow)

  // kNarrow: NarrowsTiles of the modifier.
  template <int kBlockM, int kBlockN, bool kNarrow>
  __device__ __forceinline__ static ItemInfo make(const Problem& p, const Tile* tiles, int w) {
    ItemInfo b;
    const int H = int(p.heads);
    b.h = w % H;
    b.kh = b.h / (H / int(p.kv_heads));
    const Tile tile = tiles[w / H];
    b.doc = p.docs[tile.doc];
    b.doc_index = tile.doc;
    b.i0 = tile.start;
    b.nq = min(kBlockM, int(b.doc.q_len) - b.i0);
    row_keys(p, b.doc, b.i0, &b.lo_first, &b.hi_first);
    row_keys(p, b.doc, b.i0 + b.nq - 1, &b.lo_last, &b.hi_last);
    b.j_begin = b.lo_first > 0 ? (b.lo_first / kBlockN) * kBlockN : 0;
    b.n_tiles = b.hi_last >= b.lo_first ? (b.hi_last - b.j_begin) / kBlockN + 1 : 0;
    // The keys a mask leaves the tile: here, so the producer and the consumers agree.
    if constexpr (kNarrow) {
      narrow_blocks(tile, kBlockN, &b.j_begin, &b.n_tiles);
      b.vis_lo = tile.vis_lo;
      b.vis_hi = tile.vis_hi;
    }
    return b;
  }
  // Keys j0 .. j0 + kBlockN - 1 visible to every row of the item: no element mask.
  template <int kBlockN>
  __device__ __forceinline__ bool whole(int j0) const {
    return j0 >= lo_last && j0 + kBlockN - 1 <= hi_first;
  }
};

}  // namespace driftless::layers::gpu::fast::sm90
