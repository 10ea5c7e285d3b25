// The host schedules of the fast attention kernels (layers/attention/cuda/fast/schedule.cpp).
// k_tiles_by_head, the atomic dQ's schedule, must list every key tile of every kv head
// exactly once (a tile missing leaves dK, dV and part of dQ unwritten; one twice adds its dQ
// twice), one (document, head) after another so that the adds of a few heads run at a time
// (fast_attention.h), longest documents first and, within each, the tiles in k_tiles' order
// (heaviest first). Host code only: runs without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <map>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "layers/attention/cuda/fast/fast_attention.h"
#include "layers/attention/cuda/fast/sm90/bwd_sm90.h"
#include "layers/attention/cuda/fast/sm90/ordered_dq.h"
#include "layers/attention/mask.h"

// The schedules are compiled with the CUDA backend only (schedule.cpp sits with its kernels).
#ifdef DRIFTLESS_HAVE_CUDA
namespace driftless {
namespace {

namespace fast = layers::gpu::fast;

layers::gpu::Problem causal_problem(int64_t heads, int64_t kv_heads) {
  layers::gpu::Problem p;
  p.causal = true;
  p.heads = heads;
  p.kv_heads = kv_heads;
  p.head_dim = 64;
  return p;
}

// (q_offset, q_len, k_offset, k_len): a short, a long, an empty, a one-tile document and
// one with more keys than queries.
const std::vector<layers::gpu::Doc> kDocs = {{0, 100, 0, 100},
                                             {100, 300, 100, 300},
                                             {400, 0, 400, 0},
                                             {400, 64, 400, 64},
                                             {464, 50, 464, 130}};

// k_tiles at both key tiles the dK/dV kernels take (fast_attention.h dkv_block_k: 64 keys,
// or 128 in the atomic mode with two warpgroups or the sm_90a kernel): each document's tiles
// start at 0, block_k, ... below its length, each once, heaviest (most query rows) first.
TEST(AttentionSchedule, KeyTilesCoverEveryKeyOnceAtEitherBlockSize) {
  const layers::gpu::Problem p = causal_problem(6, 3);
  for (const int block_k : {64, 128}) {
    SCOPED_TRACE("block_k " + std::to_string(block_k));
    const std::vector<fast::Tile> tiles = fast::k_tiles(p, kDocs, block_k);
    std::map<int, std::vector<int>> starts;
    for (const fast::Tile& t : tiles) starts[t.doc].push_back(t.start);
    for (size_t b = 0; b < kDocs.size(); ++b) {
      std::vector<int> want, got = starts[int(b)];
      for (int64_t j = 0; j < kDocs[b].k_len; j += block_k) want.push_back(int(j));
      std::sort(got.begin(), got.end());
      EXPECT_EQ(got, want) << "doc " << b;
    }
    // Causal: a tile's query rows fall with its start (shift = k_len - q_len).
    auto work = [&](const fast::Tile& t) {
      const layers::gpu::Doc& d = kDocs[size_t(t.doc)];
      return d.q_len - std::max<int64_t>(0, t.start - (d.k_len - d.q_len));
    };
    for (size_t i = 1; i < tiles.size(); ++i)
      EXPECT_GE(work(tiles[i - 1]), work(tiles[i])) << "tile " << i << " not heaviest first";
  }
}

TEST(AttentionSchedule, ByHeadListsEveryTileOncePerHeadDocumentAfterDocument) {
  const layers::gpu::Problem p = causal_problem(6, 3);
  const std::vector<layers::gpu::Doc>& docs = kDocs;
  for (const int block_k : {64, 128}) {
    SCOPED_TRACE("block_k " + std::to_string(block_k));
    const std::vector<fast::Tile> plain = fast::k_tiles(p, docs, block_k);
    const std::vector<fast::Tile> by = fast::k_tiles_by_head(p, docs, block_k);
    ASSERT_EQ(by.size(), plain.size() * 3);

    std::map<std::tuple<int, int, int>, int> count;
    for (const fast::Tile& t : by) ++count[{t.doc, t.start, t.head}];
    for (const fast::Tile& t : plain)
      for (int h = 0; h < 3; ++h)
        EXPECT_EQ((count[{t.doc, t.start, h}]), 1)
            << "doc " << t.doc << " start " << t.start << " head " << h;

    // Runs of one (document, head): documents by decreasing length, heads 0, 1, 2 within one,
    // and each run in k_tiles' order of that document.
    int64_t prev_len = INT64_MAX;
    int prev_doc = -1, next_head = 0;
    for (size_t i = 0; i < by.size();) {
      const int doc = by[i].doc, head = by[i].head;
      size_t j = i;
      std::vector<int> starts;
      for (; j < by.size() && by[j].doc == doc && by[j].head == head; ++j)
        starts.push_back(by[j].start);
      std::vector<int> expect;
      for (const fast::Tile& t : plain)
        if (t.doc == doc) expect.push_back(t.start);
      EXPECT_EQ(starts, expect) << "doc " << doc << " head " << head;
      if (doc != prev_doc) {
        EXPECT_EQ(next_head, prev_doc < 0 ? 0 : 3) << "doc " << prev_doc << " lacks heads";
        EXPECT_LE(docs[size_t(doc)].q_len, prev_len) << "doc " << doc << " out of length order";
        prev_len = docs[size_t(doc)].q_len;
        prev_doc = doc;
        next_head = 0;
      }
      EXPECT_EQ(head, next_head) << "doc " << doc;
      ++next_head;
      i = j;
    }
    EXPECT_EQ(next_head, 3);
  }
}

// With concurrent_ctas: the runs as above, then the tail band, the last runs merged heaviest
// first, the fewest that hold concurrent_ctas tiles.
TEST(AttentionSchedule, ByHeadEndsOnAHeaviestFirstBand) {
  const layers::gpu::Problem p = causal_problem(8, 4);
  const std::vector<layers::gpu::Doc> docs = {
      {0, 1000, 0, 1000}, {1000, 600, 1000, 600}, {1600, 200, 1600, 200}};
  // Causal, q_len == k_len: a tile's work is the query rows from its first key on.
  auto work = [&](const fast::Tile& t) { return docs[size_t(t.doc)].q_len - t.start; };
  const std::vector<fast::Tile> plain = fast::k_tiles_by_head(p, docs, 64);
  // Runs: 4 heads x 16 tiles (1000 rows), 4 x 10 (600), 4 x 4 (200).
  for (auto [ctas, band_size] :
       std::vector<std::pair<int64_t, size_t>>{{0, 0}, {1, 4}, {5, 8}, {20, 26}, {1000, 120}}) {
    SCOPED_TRACE("concurrent_ctas " + std::to_string(ctas));
    const std::vector<fast::Tile> by = fast::k_tiles_by_head(p, docs, 64, ctas);
    ASSERT_EQ(by.size(), plain.size());
    ASSERT_EQ(plain.size(), 120u);
    // The runs of the plain schedule, from the end, until they hold ctas tiles.
    size_t band_begin = plain.size();
    while (band_begin > 0 && int64_t(plain.size() - band_begin) < ctas) {
      const fast::Tile last = plain[band_begin - 1];
      while (band_begin > 0 && plain[band_begin - 1].doc == last.doc &&
             plain[band_begin - 1].head == last.head)
        --band_begin;
    }
    EXPECT_EQ(plain.size() - band_begin, band_size);
    for (size_t i = 0; i < band_begin; ++i)
      EXPECT_TRUE(by[i].doc == plain[i].doc && by[i].start == plain[i].start &&
                  by[i].head == plain[i].head)
          << "before the band the schedule is by head; tile " << i;
    std::map<std::tuple<int, int, int>, int> want, got;
    for (size_t i = band_begin; i < plain.size(); ++i) {
      ++want[{plain[i].doc, plain[i].start, plain[i].head}];
      ++got[{by[i].doc, by[i].start, by[i].head}];
      if (i > band_begin) {
        EXPECT_GE(work(by[i - 1]), work(by[i])) << "band not heaviest first";
      }
    }
    EXPECT_EQ(got, want) << "the band holds the last runs' tiles, each once";
  }
}

// k_tiles_by_head_descending, the ordered dQ's schedule: every key tile of every kv head once,
// each (document, head)'s tiles by descending start (a tile's dQ adds wait for the tiles above
// it, which must be taken first); without groups one run after another, longest documents
// first; with groups, each group round by round.
TEST(AttentionSchedule, DescendingListsEveryTileOnceEachRunFromTheTop) {
  const layers::gpu::Problem p = causal_problem(6, 3);
  const std::vector<fast::Tile> plain = fast::k_tiles(p, kDocs, 128);
  for (const int64_t group : {0, 4, 1000}) {
    SCOPED_TRACE("group_tiles " + std::to_string(group));
    const std::vector<fast::Tile> by = fast::k_tiles_by_head_descending(p, kDocs, 128, group);
    ASSERT_EQ(by.size(), plain.size() * 3);
    std::map<std::tuple<int, int, int>, int> count;
    std::map<std::pair<int, int>, int> last;  // (doc, head): the start listed last
    for (size_t i = 0; i < by.size(); ++i) {
      const fast::Tile& t = by[i];
      ++count[{t.doc, t.start, t.head}];
      const auto run = std::make_pair(t.doc, t.head);
      if (last.count(run)) {
        EXPECT_LT(t.start, last[run]) << "tile " << i << " above an earlier one";
      }
      last[run] = t.start;
      if (group == 0 && i > 0 && (t.doc != by[i - 1].doc || t.head != by[i - 1].head)) {
        EXPECT_EQ(by[i - 1].start, 0) << "tile " << i << ": a run left before its bottom tile";
      }
    }
    for (const fast::Tile& t : plain)
      for (int h = 0; h < 3; ++h) EXPECT_EQ((count[{t.doc, t.start, h}]), 1);
    if (group == 1000) {  // one group of every run: round 0 is each run's top tile
      const size_t runs = last.size();
      for (size_t i = 0; i < runs; ++i) {
        const layers::gpu::Doc& d = kDocs[size_t(by[i].doc)];
        EXPECT_EQ(by[i].start, (d.k_len - 1) / 128 * 128) << "round 0, tile " << i;
      }
    }
  }
}

// The ordered dQ's grid condition: every 128-key tile's first query row on the document's
// 64-row grid (causal: k_len - q_len a multiple of 64; or no causal bound at all).
TEST(AttentionSchedule, OrderedDqFitsOnlyTheQueryGrid) {
  layers::gpu::Problem p = causal_problem(4, 4);
  using Docs = std::vector<layers::gpu::Doc>;
  EXPECT_TRUE(fast::sm90::ordered_dq_fits(p, Docs{{0, 100, 0, 100}, {100, 300, 100, 300}}));
  EXPECT_TRUE(fast::sm90::ordered_dq_fits(p, Docs{{0, 100, 0, 164}}));   // 64 past keys
  // 250 past keys: tile 256's first row is 6.
  EXPECT_FALSE(fast::sm90::ordered_dq_fits(p, Docs{{0, 100, 0, 100}, {100, 50, 100, 300}}));
  EXPECT_TRUE(fast::sm90::ordered_dq_fits(p, Docs{{0, 100, 0, 128}}));   // one tile: row 0
  EXPECT_FALSE(fast::sm90::ordered_dq_fits(p, Docs{{0, 100, 0, 130}}));  // tile 128: row 98
  p.causal = false;
  EXPECT_TRUE(fast::sm90::ordered_dq_fits(p, Docs{{0, 50, 0, 200}}));
}

// The ordered dQ's count (sm90/ordered_dq.h) against the kernels' query steps (bwd_step.cuh
// query_steps at 128-key tiles and 64-row steps, restated here): for every tile and every
// block its steps reach, the tiles above it that have a step on that block, on documents the
// grid condition admits (causal or not, past keys, left and right windows).
TEST(AttentionSchedule, OrderedDqCountsTheTilesAboveThatReachTheBlock) {
  struct Steps {
    int64_t begin, count;  // query rows begin + 64 s, s < count
  };
  int checked = 0;
  for (const bool causal : {true, false})
    for (const int64_t wl : {int64_t(-1), int64_t(100), int64_t(300)})
      for (const int64_t wr : {int64_t(-1), int64_t(0), int64_t(64), int64_t(192)})
        for (auto [q_len, k_len] : std::vector<std::pair<int64_t, int64_t>>{
                 {1, 1}, {64, 64}, {100, 100}, {700, 700}, {100, 164}, {300, 556}, {640, 513}}) {
          layers::gpu::Problem p = causal_problem(2, 2);
          p.causal = causal;
          p.window_left = wl;
          p.window_right = wr;
          const layers::gpu::Doc d{0, q_len, 0, k_len};
          if (!fast::sm90::ordered_dq_fits(p, {d})) continue;
          const int64_t shift = k_len - q_len;
          const int64_t w_l = layers::window_in_32_bits(wl, q_len, k_len),
                        w_r = layers::window_in_32_bits(wr, q_len, k_len);
          auto steps = [&](int64_t j0) {
            const int64_t nk = std::min<int64_t>(128, k_len - j0);
            int64_t begin = 0, end = q_len - 1;
            if (causal) begin = std::max(begin, j0 - shift);
            if (w_r >= 0) begin = std::max(begin, j0 - w_r - shift);
            if (w_l >= 0) end = std::min(end, j0 + nk - 1 + w_l - shift);
            return Steps{begin, end >= begin ? (end - begin) / 64 + 1 : 0};
          };
          for (int64_t j0 = 0; j0 < k_len; j0 += 128) {
            const Steps mine = steps(j0);
            for (int64_t s = 0; s < mine.count; ++s) {
              const int64_t q0 = mine.begin + 64 * s;
              ASSERT_EQ(q0 % 64, 0) << "a step off the grid the counters assume";
              int above = 0;
              for (int64_t j = j0 + 128; j < k_len; j += 128) {
                const Steps other = steps(j);
                if (q0 >= other.begin && q0 < other.begin + 64 * other.count) ++above;
              }
              EXPECT_EQ((fast::sm90::ordered_dq_before<64, 128>(int(q_len), int(k_len), causal, wr,
                                                                 int(j0), int(q0))),
                        above)
                  << "q " << q_len << " k " << k_len << " causal " << causal << " wl " << wl
                  << " wr " << wr << " tile " << j0 << " block " << q0;
              ++checked;
            }
          }
        }
  std::printf("[attention schedule] ordered dQ counts checked: %d\n", checked);
  EXPECT_GT(checked, 100);
}

}  // namespace
}  // namespace driftless
#endif  // DRIFTLESS_HAVE_CUDA
