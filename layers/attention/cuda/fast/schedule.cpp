// Host schedule of the fast attention kernels (fast_attention.h): the list of (document,
// tile start) pairs the CTAs walk, heaviest first so the long causal tiles of long documents
// are not left for the tail of the grid (the atomic dQ's: per document and head, but for a
// tail band, see k_tiles_by_head). Sorted stably, so the schedule (and with it
// nothing numeric: each output is reduced by one CTA in a fixed order) is deterministic.
#include <algorithm>
#include <cstdint>

#include "engine/core/error.h"
#include "layers/attention/cuda/fast/fast_attention.h"
#include "layers/attention/mask.h"

namespace driftless::layers::gpu::fast {

namespace {

struct Weighted {
  int64_t work;
  Tile tile;
};

std::vector<Tile> sorted(std::vector<Weighted> w) {
  std::stable_sort(w.begin(), w.end(),
                   [](const Weighted& a, const Weighted& b) { return a.work > b.work; });
  std::vector<Tile> out;
  out.reserve(w.size());
  for (const Weighted& x : w) out.push_back(x.tile);
  return out;
}

// The key tiles of document b with their work (query rows that may see a key of the tile,
// the same bounds as the kernel's).
std::vector<Weighted> doc_k_tiles(const Problem& p, const Doc& d, size_t b, int block_k) {
  std::vector<Weighted> w;
  // (windows clamped as the kernel's: no overflow near INT64_MAX)
  const int64_t wl = window_in_32_bits(p.window_left, d.q_len, d.k_len),
                wr = window_in_32_bits(p.window_right, d.q_len, d.k_len);
  for (int64_t j0 = 0; j0 < d.k_len; j0 += block_k) {
    const int64_t j1 = std::min(d.k_len, j0 + block_k) - 1;
    const int64_t i_begin = first_visible_query<int64_t>(j0, d.q_len, d.k_len, p.causal, wr),
                  i_end = last_visible_query<int64_t>(j1, d.q_len, d.k_len, wl);
    w.push_back({std::max<int64_t>(i_end - i_begin + 1, 0), {int32_t(b), int32_t(j0)}});
  }
  return w;
}

}  // namespace

Problem with_row_strides(const Problem& p) {
  Problem r = p;
  if (r.q_row_heads == 0) r.q_row_heads = int16_t(r.heads);
  if (r.k_row_heads == 0) r.k_row_heads = int16_t(r.kv_heads);
  if (r.v_row_heads == 0) r.v_row_heads = int16_t(r.kv_heads);
  DL_CHECK(r.heads <= INT16_MAX && r.q_row_heads >= r.heads && r.k_row_heads >= r.kv_heads &&
               r.v_row_heads >= r.kv_heads,
           "attention",
           "rows of " << r.q_row_heads << " / " << r.k_row_heads << " / " << r.v_row_heads
                      << " heads cannot hold " << r.heads << " / " << r.kv_heads << " heads");
  return r;
}

std::vector<Tile> q_tiles(const Problem& p, const std::vector<Doc>& docs, int block_q) {
  std::vector<Weighted> w;
  for (size_t b = 0; b < docs.size(); ++b) {
    const Doc& d = docs[b];
    for (int64_t i0 = 0; i0 < d.q_len; i0 += block_q) {
      const int64_t i1 = std::min(d.q_len, i0 + block_q) - 1;
      int64_t lo0, hi0, lo1, hi1;
      visible_keys(i0, d.q_len, d.k_len, p.causal, p.window_left, p.window_right, &lo0, &hi0);
      visible_keys(i1, d.q_len, d.k_len, p.causal, p.window_left, p.window_right, &lo1, &hi1);
      w.push_back({std::max<int64_t>(hi1 - lo0 + 1, 0), {int32_t(b), int32_t(i0)}});
    }
  }
  return sorted(std::move(w));
}

std::vector<Tile> k_tiles(const Problem& p, const std::vector<Doc>& docs, int block_k) {
  std::vector<Weighted> w;
  for (size_t b = 0; b < docs.size(); ++b) {
    std::vector<Weighted> d = doc_k_tiles(p, docs[b], b, block_k);
    w.insert(w.end(), d.begin(), d.end());
  }
  return sorted(std::move(w));
}

std::vector<Tile> k_tiles_by_head(const Problem& p, const std::vector<Doc>& docs, int block_k,
                                  int64_t concurrent_ctas) {
  std::vector<size_t> order(docs.size());
  for (size_t b = 0; b < order.size(); ++b) order[b] = b;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return docs[a].q_len > docs[b].q_len; });
  std::vector<std::vector<Weighted>> runs;  // one per (document, kv head), in schedule order
  for (size_t b : order) {
    std::vector<Weighted> doc = doc_k_tiles(p, docs[b], b, block_k);
    std::stable_sort(doc.begin(), doc.end(),
                     [](const Weighted& x, const Weighted& y) { return x.work > y.work; });
    for (int32_t h = 0; h < int32_t(p.kv_heads); ++h) {
      runs.push_back(doc);
      for (Weighted& x : runs.back()) x.tile.head = h;
    }
  }
  // The tail band: the fewest last runs that hold concurrent_ctas tiles, merged heaviest
  // first.
  size_t band = 0;
  int64_t band_tiles = 0;
  while (band < runs.size() && band_tiles < concurrent_ctas) {
    band_tiles += int64_t(runs[runs.size() - 1 - band].size());
    ++band;
  }
  std::vector<Tile> out;
  for (size_t r = 0; r + band < runs.size(); ++r)
    for (const Weighted& x : runs[r]) out.push_back(x.tile);
  std::vector<Weighted> tail;
  for (size_t r = runs.size() - band; r < runs.size(); ++r)
    tail.insert(tail.end(), runs[r].begin(), runs[r].end());
  const std::vector<Tile> merged = sorted(std::move(tail));
  out.insert(out.end(), merged.begin(), merged.end());
  return out;
}

std::vector<Tile> k_tiles_by_head_descending(const Problem& p, const std::vector<Doc>& docs,
                                             int block_k, int64_t group_tiles) {
  std::vector<size_t> order(docs.size());
  for (size_t b = 0; b < order.size(); ++b) order[b] = b;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return docs[a].q_len > docs[b].q_len; });
  std::vector<std::vector<Tile>> runs;  // one per (document, kv head), top tile first
  for (size_t b : order)
    for (int32_t h = 0; h < int32_t(p.kv_heads) && docs[b].k_len > 0; ++h) {
      runs.emplace_back();
      for (int64_t j0 = (docs[b].k_len - 1) / block_k * block_k; j0 >= 0; j0 -= block_k)
        runs.back().push_back({int32_t(b), int32_t(j0), h});
    }
  std::vector<Tile> out;
  for (size_t r = 0; r < runs.size();) {
    // A group: the fewest next runs that hold group_tiles tiles (one run where 0), listed
    // round by round, the next tile of each run in turn.
    size_t end = r + 1;
    int64_t tiles = int64_t(runs[r].size());
    while (end < runs.size() && tiles < group_tiles) tiles += int64_t(runs[end++].size());
    for (size_t depth = 0;; ++depth) {
      bool any = false;
      for (size_t x = r; x < end; ++x)
        if (depth < runs[x].size()) {
          out.push_back(runs[x][depth]);
          any = true;
        }
      if (!any) break;
    }
    r = end;
  }
  return out;
}

}  // namespace driftless::layers::gpu::fast
