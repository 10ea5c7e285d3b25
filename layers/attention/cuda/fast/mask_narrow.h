// What a mask expression leaves of a fast-kernel tile schedule (fast_attention.h Tile): the
// tiles it hides whole dropped, the range of the other dimension each kept tile walks
// narrowed from both ends to the blocks it does not hide whole, and the blocks it shows
// whole marked (expr::mask_cover's interval arithmetic). Plain C++ over host data: built, and
// tested, without CUDA too.
#pragma once
#include <cstdint>
#include <vector>

#include "layers/attention/cuda/fast/fast_attention.h"
#include "layers/attention/expr/expr.h"

namespace driftless::layers::gpu::fast {

// The mask and the positions it sees: the kernels' query position is row + k_len - q_len of
// its document; document 0's query and key positions are shifted further by shift_q and
// shift_k (a ring call's, ModExpr); heads [head_offset, head_offset + heads).
struct MaskScope {
  const expr::Program* mask = nullptr;
  int64_t head_offset = 0, heads = 1;
  int64_t shift_q = 0, shift_k = 0;
};

// Most mask_cover probes spent finding one end of a tile's range: the scan gallops (spans
// of 1, 2, 4, ... blocks while proven hidden, then a binary search), so a contiguous hidden
// run of n blocks that the interval arithmetic proves costs about 2 log2(n) probes, within
// this budget for any document below kMaxDocLen (2^24 blocks); past the budget the range
// keeps what it has proven (narrowing less is always correct).
constexpr int kMaxNarrowProbes = 64;

// tiles: a schedule of q_tiles (query = true; tile rows `block` queries, range over keys) or
// k_tiles / k_tiles_by_head (query = false; `block` keys, range over queries). Tiles the mask
// hides whole are dropped where may_drop (then *dropped is set: the caller zero-fills their
// rows as padded rows), else kept with an empty range [0, 0) (the dQ tiles: the wgmma dQ
// kernel writes every row's delta). Each kept tile's [lo, hi) is set to the span of the
// kNarrowBlock-aligned blocks of the other dimension (within the causal and window bounds of
// the tile's rows) between the first and the last block the mask does not prove hidden; a
// hidden block in the middle stays (the kernels mask it per pair). Each kept tile's
// [vis_lo, vis_hi) is set to a contiguous run of kNarrowBlock-aligned blocks of the other
// dimension, inside [lo, hi) and wholly inside the document, that the mask proves visible for
// every pair with the tile's rows and heads (empty if none is found): the kernels skip the
// mask's evaluation on their blocks inside it. Only one run: with a visible run at each end
// (sinks and a window) the longer one found. Cost: at most 1 + 2 kMaxNarrowProbes mask_cover
// calls a tile for [lo, hi), and 1 + 4 (1 + 2 kMaxNarrowProbes) for the visible range
// (about 2 + 4 log2 n for the usual one-run masks over n blocks).
std::vector<Tile> narrow_tiles_by_mask(const Problem& p, const std::vector<Doc>& docs,
                                       std::vector<Tile> tiles, int block, bool query,
                                       bool may_drop, const MaskScope& scope, bool* dropped);

}  // namespace driftless::layers::gpu::fast
