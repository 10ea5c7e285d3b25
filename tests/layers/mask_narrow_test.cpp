// A mask's narrowing of the fast kernels' tile schedules (layers/attention/cuda/fast/
// mask_narrow.h), on the host: against every pair of each tile, a dropped tile or a block cut
// from a tile's range never holds a visible pair (else the GPU would lose attention weight),
// a tile's visible range holds only pairs the mask shows (else the GPU would skip hiding
// one), and the common masks are narrowed as far as promised (a sliding window to the window,
// a prefix-LM's prefix kept, an always-true mask left whole) and given the visible ranges
// promised. Plain C++: runs without a GPU.
#include "layers/attention/cuda/fast/mask_narrow.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "layers/attention/mask.h"

namespace driftless::layers::gpu::fast {
namespace {

constexpr int64_t kHeads = 2;

Problem problem(bool causal, int64_t window_left = -1, int64_t window_right = -1) {
  Problem p;
  p.causal = causal;
  p.window_left = window_left;
  p.window_right = window_right;
  p.heads = kHeads;
  p.kv_heads = kHeads;
  p.head_dim = 64;
  return p;
}

std::shared_ptr<const expr::Program> mask_of(const std::string& src) {
  return expr::compile_mask_mod(src, {}, int(kHeads));
}

struct Narrowed {
  std::vector<Tile> tiles;
  bool dropped = false;
};

Narrowed narrow(const Problem& p, const std::vector<Doc>& docs, const std::vector<Tile>& tiles,
                int block, bool query, bool may_drop, const MaskScope& scope) {
  Narrowed n;
  n.tiles = narrow_tiles_by_mask(p, docs, tiles, block, query, may_drop, scope, &n.dropped);
  return n;
}

// Whether the pair (query row i, key row j) of document b is visible: the call's causal and
// window masks, then the mask at the kernels' positions (ModExpr).
bool visible(const Problem& p, const std::vector<Doc>& docs, const MaskScope& s, int32_t b,
             int64_t i, int64_t j, int64_t h) {
  const Doc& d = docs[size_t(b)];
  int64_t lo, hi;
  visible_keys(i, d.q_len, d.k_len, p.causal, p.window_left, p.window_right, &lo, &hi);
  if (j < lo || j > hi) return false;
  const int64_t qs = b == 0 ? s.shift_q : 0, ks = b == 0 ? s.shift_k : 0;
  const expr::Bindings<double> bind{nullptr, 0};
  return expr::eval_bool(*s.mask->root, bind, 0.0, s.head_offset + h, i + d.k_len - d.q_len + qs,
                         j + ks);
}

// Whether the mask expression alone shows the pair (query row i, key row j) of document b at
// the kernels' positions (no causal or window mask).
bool shown(const std::vector<Doc>& docs, const MaskScope& s, int32_t b, int64_t i, int64_t j,
           int64_t h) {
  const Doc& d = docs[size_t(b)];
  const int64_t qs = b == 0 ? s.shift_q : 0, ks = b == 0 ? s.shift_k : 0;
  const expr::Bindings<double> bind{nullptr, 0};
  return expr::eval_bool(*s.mask->root, bind, 0.0, s.head_offset + h, i + d.k_len - d.q_len + qs,
                         j + ks);
}

// Every kept tile's visible range [vis_lo, vis_hi) is empty, or kNarrowBlock-aligned, inside
// the document and inside [lo, hi), and the mask shows every pair of the tile's rows (inside
// the document) with it, at every head: the kernels skip evaluating the mask there. Returns
// how many rows of the other dimension the ranges hold, so callers can check they hold some.
int64_t expect_shown_sound(const std::vector<Doc>& docs, const std::vector<Tile>& out, int block,
                           bool query, const MaskScope& s, const std::string& what) {
  int64_t held = 0;
  for (const Tile& t : out) {
    if (t.vis_lo >= t.vis_hi) {
      EXPECT_TRUE(t.vis_lo == 0 && t.vis_hi == 0) << what << ": an empty range not [0, 0)";
      continue;
    }
    const Doc& d = docs[size_t(t.doc)];
    const int64_t own = query ? d.q_len : d.k_len, other = query ? d.k_len : d.q_len;
    const std::string tile = what + ": tile (doc " + std::to_string(t.doc) + ", start " +
                             std::to_string(t.start) + ") visible range [" +
                             std::to_string(t.vis_lo) + ", " + std::to_string(t.vis_hi) + ")";
    EXPECT_EQ(t.vis_lo % kNarrowBlock, 0) << tile;
    EXPECT_EQ(t.vis_hi % kNarrowBlock, 0) << tile;
    EXPECT_GE(t.vis_lo, 0) << tile;
    EXPECT_LE(t.vis_hi, other) << tile << ": past the document";
    EXPECT_GE(t.vis_lo, t.lo) << tile << ": outside [lo, hi)";
    EXPECT_LE(t.vis_hi, t.hi) << tile << ": outside [lo, hi)";
    held += t.vis_hi - t.vis_lo;
    for (int64_t r = t.start; r < std::min<int64_t>(own, t.start + block); ++r)
      for (int64_t o = t.vis_lo; o < std::min<int64_t>(t.vis_hi, other); ++o)
        for (int64_t h = 0; h < s.heads; ++h) {
          const bool v = query ? shown(docs, s, t.doc, r, o, h) : shown(docs, s, t.doc, o, r, h);
          if (!v) {
            ADD_FAILURE() << tile << " but the mask hides row " << r << " from " << o << " at head "
                          << h;
            return held;
          }
        }
  }
  return held;
}

// Every visible pair of every input tile lies in a kept tile's [lo, hi); dropped tiles (and
// tiles with an empty range) have none. Returns how many rows of the other dimension the
// narrowing removed, so callers can check it did something.
int64_t expect_sound(const Problem& p, const std::vector<Doc>& docs, const std::vector<Tile>& in,
                     const std::vector<Tile>& out, int block, bool query, const MaskScope& s,
                     const std::string& what) {
  int64_t removed = 0;
  for (const Tile& t : in) {
    const auto it = std::find_if(out.begin(), out.end(), [&](const Tile& o) {
      return o.doc == t.doc && o.start == t.start && o.head == t.head;
    });
    const bool kept = it != out.end();
    const int64_t lo = kept ? it->lo : 0, hi = kept ? it->hi : 0;
    const Doc& d = docs[size_t(t.doc)];
    const int64_t own = query ? d.q_len : d.k_len, other = query ? d.k_len : d.q_len;
    for (int64_t r = t.start; r < std::min<int64_t>(own, t.start + block); ++r)
      for (int64_t o = 0; o < other; ++o) {
        if (o >= lo && o < hi) continue;
        ++removed;
        for (int64_t h = 0; h < s.heads; ++h) {
          const bool v =
              query ? visible(p, docs, s, t.doc, r, o, h) : visible(p, docs, s, t.doc, o, r, h);
          if (v) {
            ADD_FAILURE() << what << ": tile (doc " << t.doc << ", start " << t.start << ") "
                          << (kept ? "narrowed to [" + std::to_string(lo) + ", " +
                                         std::to_string(hi) + ")"
                                   : std::string("dropped"))
                          << " but row " << r << " sees " << o << " at head " << h;
            return removed;
          }
        }
      }
  }
  return removed;
}

TEST(MaskNarrow, SlidingWindowKeepsOnlyTheWindowsBlocks) {
  const Problem p = problem(true);
  const std::vector<Doc> docs = {{0, 4096, 0, 4096}};
  const auto mask = mask_of("q - k < 256");
  const MaskScope s{mask.get(), 0, kHeads};
  const std::vector<Tile> qt = q_tiles(p, docs, 128);
  const Narrowed q = narrow(p, docs, qt, 128, true, true, s);
  EXPECT_FALSE(q.dropped);
  ASSERT_EQ(q.tiles.size(), qt.size());
  for (const Tile& t : q.tiles) {
    // Row start sees keys from start - 255: its block, and no block before it.
    EXPECT_GE(t.lo, t.start - 256 - kNarrowBlock) << "query tile " << t.start;
    EXPECT_LE(t.lo, std::max(0, t.start - 255)) << "query tile " << t.start;
    EXPECT_EQ(t.hi, kTileUnbounded) << "query tile " << t.start << ": the diagonal is visible";
    // Every row of the tile sees keys from start + 127 - 255 to its diagonal (the mask shows
    // every later key too): the visible range is those blocks, up to the tile's last key.
    EXPECT_EQ(t.vis_lo, std::max(0, t.start - 128)) << "query tile " << t.start;
    EXPECT_EQ(t.vis_hi, t.start + 128) << "query tile " << t.start;
  }
  EXPECT_GT(expect_sound(p, docs, qt, q.tiles, 128, true, s, "q - k < 256, query tiles"), 0);
  EXPECT_GT(expect_shown_sound(docs, q.tiles, 128, true, s, "q - k < 256, query tiles"), 0);
  // The galloping scan finds the window's edge within its probe budget however far it is:
  // the last tile of a 2^20-row document (32767 hidden blocks before it).
  const std::vector<Doc> long_doc = {{0, 1 << 20, 0, 1 << 20}};
  const Tile last{0, (1 << 20) - 128};
  const Narrowed l = narrow(p, long_doc, {last}, 128, true, true, s);
  ASSERT_EQ(l.tiles.size(), 1u);
  EXPECT_GE(l.tiles[0].lo, last.start - 256 - kNarrowBlock);
  EXPECT_LE(l.tiles[0].lo, last.start - 255);

  const std::vector<Tile> kt = k_tiles(p, docs, 64);
  const Narrowed k = narrow(p, docs, kt, 64, false, true, s);
  EXPECT_FALSE(k.dropped);
  ASSERT_EQ(k.tiles.size(), kt.size());
  for (const Tile& t : k.tiles) {
    // Queries up to start + 63 + 255 see a key of the tile: the range ends with that row's
    // block of 32, unless that block is the document's last (then nothing is cut).
    const int64_t last = t.start + 63 + 255;
    if (last / kNarrowBlock < 4095 / kNarrowBlock) {
      EXPECT_GT(t.hi, last) << "key tile " << t.start;
      EXPECT_LE(t.hi, last + kNarrowBlock) << "key tile " << t.start;
    } else {
      EXPECT_EQ(t.hi, kTileUnbounded) << "key tile " << t.start;
    }
    // Queries from the tile's start (causal) to start + 255 see every key of it.
    EXPECT_EQ(t.vis_lo, t.start) << "key tile " << t.start;
    EXPECT_EQ(t.vis_hi, std::min(t.start + 256, 4096)) << "key tile " << t.start;
  }
  EXPECT_GT(expect_sound(p, docs, kt, k.tiles, 64, false, s, "q - k < 256, key tiles"), 0);
  EXPECT_GT(expect_shown_sound(docs, k.tiles, 64, false, s, "q - k < 256, key tiles"), 0);
}

TEST(MaskNarrow, PrefixLmKeepsThePrefixBlockForEveryTile) {
  const Problem p = problem(true);
  const std::vector<Doc> docs = {{0, 1000, 0, 1000}, {1000, 300, 1000, 300}};
  const auto mask = mask_of("k < 64 || k <= q");
  const MaskScope s{mask.get(), 0, kHeads};
  const std::vector<Tile> qt = q_tiles(p, docs, 128);
  const Narrowed q = narrow(p, docs, qt, 128, true, true, s);
  EXPECT_FALSE(q.dropped);
  ASSERT_EQ(q.tiles.size(), qt.size());
  for (const Tile& t : q.tiles) {
    EXPECT_EQ(t.lo, 0) << "query tile " << t.start << " lost the prefix";
    EXPECT_EQ(t.hi, kTileUnbounded) << "query tile " << t.start;
    // Shown to every row: the prefix's blocks and the blocks left of the tile's diagonal.
    EXPECT_EQ(t.vis_lo, 0) << "query tile " << t.start;
    EXPECT_EQ(t.vis_hi, std::max(64, t.start)) << "query tile " << t.start;
  }
  expect_sound(p, docs, qt, q.tiles, 128, true, s, "prefix-LM, query tiles");
  EXPECT_GT(expect_shown_sound(docs, q.tiles, 128, true, s, "prefix-LM, query tiles"), 0);
  const std::vector<Tile> kt = k_tiles(p, docs, 64);
  const Narrowed k = narrow(p, docs, kt, 64, false, true, s);
  EXPECT_FALSE(k.dropped);
  expect_sound(p, docs, kt, k.tiles, 64, false, s, "prefix-LM, key tiles");
  EXPECT_GT(expect_shown_sound(docs, k.tiles, 64, false, s, "prefix-LM, key tiles"), 0);
}

TEST(MaskNarrow, AlwaysTrueMaskLeavesEveryTileWhole) {
  const Problem p = problem(false);
  const std::vector<Doc> docs = {{0, 700, 0, 500}, {700, 65, 500, 129}};
  const auto mask = mask_of("k >= 0");
  const MaskScope s{mask.get(), 0, kHeads};
  for (bool query : {true, false}) {
    const int block = query ? 128 : 64;
    const std::vector<Tile> in = query ? q_tiles(p, docs, block) : k_tiles(p, docs, block);
    const Narrowed n = narrow(p, docs, in, block, query, true, s);
    EXPECT_FALSE(n.dropped);
    ASSERT_EQ(n.tiles.size(), in.size());
    for (const Tile& t : n.tiles) {
      EXPECT_EQ(t.lo, 0);
      EXPECT_EQ(t.hi, kTileUnbounded);
      // Every whole block of the document shown.
      const Doc& d = docs[size_t(t.doc)];
      const int64_t other = query ? d.k_len : d.q_len;
      EXPECT_EQ(t.vis_lo, 0);
      EXPECT_EQ(t.vis_hi, other / kNarrowBlock * kNarrowBlock);
    }
    expect_shown_sound(docs, n.tiles, block, query, s, "k >= 0");
  }
}

// q < 200 hides the query tiles past row 200: dropped (and flagged) where the caller may
// drop them, kept with an empty range where it may not (the dQ tiles, whose kernel writes
// every row's delta).
TEST(MaskNarrow, HiddenTilesAreDroppedOrEmptied) {
  const Problem p = problem(true);
  const std::vector<Doc> docs = {{0, 1024, 0, 1024}};
  const auto mask = mask_of("q < 200");
  const MaskScope s{mask.get(), 0, kHeads};
  const std::vector<Tile> qt = q_tiles(p, docs, 128);
  const Narrowed dropped = narrow(p, docs, qt, 128, true, true, s);
  EXPECT_TRUE(dropped.dropped);
  EXPECT_EQ(dropped.tiles.size(), 2u);  // rows 0-127 and 128-255
  const Narrowed kept = narrow(p, docs, qt, 128, true, false, s);
  EXPECT_FALSE(kept.dropped);
  ASSERT_EQ(kept.tiles.size(), qt.size());
  for (const Tile& t : kept.tiles)
    if (t.start >= 256) {
      EXPECT_TRUE(t.lo == 0 && t.hi == 0) << "query tile " << t.start;
    }
  expect_sound(p, docs, qt, kept.tiles, 128, true, s, "q < 200, dQ tiles");
  // Key tiles past 200 are seen by no query; the rest by queries up to 199 only.
  const std::vector<Tile> kt = k_tiles(p, docs, 64);
  const Narrowed k = narrow(p, docs, kt, 64, false, true, s);
  EXPECT_TRUE(k.dropped);
  EXPECT_EQ(k.tiles.size(), 4u);
  for (const Tile& t : k.tiles) EXPECT_LE(t.hi, 224) << "key tile " << t.start;
  expect_sound(p, docs, kt, k.tiles, 64, false, s, "q < 200, key tiles");
}

// Many masks, windows, shifted positions (a ring call's document 0), more keys than queries
// and odd lengths: never a visible pair cut, never a hidden pair in a visible range.
TEST(MaskNarrow, NeverCutsAVisiblePair) {
  const char* masks[] = {"q - k < 40",
                         "q - k < 24 || k < 4",
                         "h != 1 || q - k < 8",
                         "abs(q - k) <= 50 || h == 0",
                         "!(k >= 100 && k < 200)",
                         "k > 150 && q < 240",
                         "floor(q / 64.0) == floor(k / 64.0)",
                         "q - k > 90",
                         "k < 70 && q - k < 28"};
  const std::vector<Doc> docs = {
      {0, 257, 0, 300}, {257, 1, 300, 1}, {258, 129, 301, 63}, {387, 0, 364, 0}};
  const Problem problems[] = {problem(true), problem(false), problem(true, 70, -1),
                              problem(false, 30, 100)};
  int64_t removed = 0, held = 0;
  for (const char* src : masks)
    for (const Problem& p : problems)
      for (int64_t shift : {int64_t(0), int64_t(500)}) {
        const auto mask = mask_of(src);
        const MaskScope s{mask.get(), 0, kHeads, shift, shift / 2};
        const std::string what = std::string(src) + (p.causal ? " causal" : "") + " window " +
                                 std::to_string(p.window_left) + "," +
                                 std::to_string(p.window_right) + " shift " + std::to_string(shift);
        for (bool query : {true, false})
          for (int block : {64, 128}) {
            const std::vector<Tile> in = query ? q_tiles(p, docs, block) : k_tiles(p, docs, block);
            for (bool may_drop : {true, false}) {
              const Narrowed n = narrow(p, docs, in, block, query, may_drop, s);
              if (!may_drop) {
                EXPECT_EQ(n.tiles.size(), in.size()) << what;
              }
              removed += expect_sound(p, docs, in, n.tiles, block, query, s, what);
              held += expect_shown_sound(docs, n.tiles, block, query, s, what);
            }
          }
      }
  EXPECT_GT(removed, 0) << "nothing was narrowed: the check above means nothing";
  EXPECT_GT(held, 0) << "no visible range was found: the check above means nothing";
}

}  // namespace
}  // namespace driftless::layers::gpu::fast
