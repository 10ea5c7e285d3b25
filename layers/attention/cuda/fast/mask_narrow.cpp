// The mask's narrowing of a fast-kernel tile schedule (mask_narrow.h): whole tiles dropped,
// each kept tile's range of the other dimension trimmed from both ends, and its visible range
// found, by galloping scans of expr::mask_cover over spans of kNarrowBlock-aligned blocks.
#include "layers/attention/cuda/fast/mask_narrow.h"

#include <algorithm>

#include "layers/attention/mask.h"

namespace driftless::layers::gpu::fast {

namespace {

// How many of n blocks, counted from one end, proven(a, b) proves hidden (or visible: the
// predicate's) (a, b: the first and one-past-the-last block of a span, counted from that end).
// Spans double while proven; after the first failure a binary search between the proven run and the
// failed span's end (a span not proven whole ends the run before its last block, or the interval
// arithmetic is too loose there: either way the run found is a proven one). About 2 log2(n) probes
// for a run the interval arithmetic proves, within the budget for every document length; past the
// budget the run keeps what it has proven.
template <class Proven>
int64_t proven_run(int64_t n, Proven proven) {
  int64_t done = 0, limit = n, step = 1;  // [0, done) proven; the search ends by limit
  bool growing = true;
  for (int probes = 0; done < limit && probes < kMaxNarrowProbes; ++probes) {
    step = growing ? std::min(step, limit - done) : (limit - done + 1) / 2;
    if (proven(done, done + step)) {
      done += step;
      step *= 2;
    } else {
      limit = done + step - 1;
      growing = false;
    }
  }
  return done;
}

}  // namespace

std::vector<Tile> narrow_tiles_by_mask(const Problem& p, const std::vector<Doc>& docs,
                                       std::vector<Tile> tiles, int block, bool query,
                                       bool may_drop, const MaskScope& scope, bool* dropped) {
  if (scope.mask == nullptr) return tiles;
  constexpr int64_t B = kNarrowBlock;
  std::vector<Tile> kept;
  kept.reserve(tiles.size());
  for (Tile t : tiles) {
    const Doc& doc = docs[size_t(t.doc)];
    const int64_t shift = doc.k_len - doc.q_len;  // the kernels' query position: row + shift
    const int64_t qs = t.doc == 0 ? scope.shift_q : 0, ks = t.doc == 0 ? scope.shift_k : 0;
    // The tile's own rows [r0, r1] and the rows of the other dimension [o0, o1] its rows may
    // pair with under the call's causal and window masks (inclusive).
    int64_t r0 = t.start, r1, o0, o1;
    if (query) {
      r1 = std::min<int64_t>(doc.q_len, t.start + block) - 1;
      int64_t unused;
      visible_keys(r0, doc.q_len, doc.k_len, p.causal, p.window_left, p.window_right, &o0, &unused);
      visible_keys(r1, doc.q_len, doc.k_len, p.causal, p.window_left, p.window_right, &unused, &o1);
    } else {  // every query row that may see a key of the tile (schedule.cpp doc_k_tiles)
      r1 = std::min<int64_t>(doc.k_len, t.start + block) - 1;
      const int64_t wl = window_in_32_bits(p.window_left, doc.q_len, doc.k_len),
                    wr = window_in_32_bits(p.window_right, doc.q_len, doc.k_len);
      o0 = 0;
      o1 = doc.q_len - 1;
      if (p.causal) o0 = std::max(o0, r0 - shift);
      if (wr >= 0) o0 = std::max(o0, r0 - wr - shift);
      if (wl >= 0) o1 = std::min(o1, r1 + wl - shift);
    }
    if (r0 > r1 || o0 > o1) {  // nothing to pair: the kernels write what a row seeing nothing gets
      kept.push_back(t);
      continue;
    }
    const int64_t h0 = scope.head_offset, h1 = scope.head_offset + scope.heads - 1;
    // What the mask does to the pairs of the tile's rows with the other dimension's [a, b].
    auto cover = [&](int64_t a, int64_t b) {
      const expr::PairBox box =
          query ? expr::PairBox{r0 + shift + qs, r1 + shift + qs, a + ks, b + ks, h0, h1}
                : expr::PairBox{a + shift + qs, b + shift + qs, r0 + ks, r1 + ks, h0, h1};
      return expr::mask_cover(*scope.mask, box);
    };
    auto hidden = [&](int64_t a, int64_t b) { return cover(a, b) == expr::MaskCover::hidden; };
    // Blocks of B rows on the grid of multiples of B, clipped to [o0, o1].
    const int64_t base = o0 / B * B, n = (o1 - base) / B + 1;
    auto span = [&](int64_t i, int64_t j) {  // blocks i .. j - 1
      return hidden(std::max(o0, base + i * B), std::min(o1, base + j * B - 1));
    };
    int64_t first = 0, last = n;  // blocks [first, last) keep a pair the mask may show
    if (hidden(o0, o1)) {
      first = last = 0;
    } else {
      first = proven_run(n, span);
      if (first < n)
        last = n - proven_run(n - first, [&](int64_t a, int64_t b) { return span(n - b, n - a); });
    }
    if (first >= last) {  // every block hidden
      if (may_drop) {
        *dropped = true;
        continue;
      }
      t.lo = t.hi = 0;
    } else {
      if (first > 0) t.lo = int32_t(base + first * B);
      if (last < n) t.hi = int32_t(base + last * B);
      // The visible range: among the kept blocks that lie whole inside the document (so a
      // kernel block inside it holds no padded position, where skipping the mask could change
      // a zero's sign), the longest contiguous run of blocks the mask shows whole found by
      // growing runs from a few seeds: the last kept block and the blocks of the tile's
      // diagonal (a window's run, the causal side of a prefix-LM's), then the first kept block
      // (a prefix's). Whole blocks, not clipped to [o0, o1]: the kernels' blocks overhang the
      // causal and window bounds, and a pair there must be visible too (the kernels still
      // apply their own masks to it, as without a mask expression).
      const int64_t other_len = query ? doc.k_len : doc.q_len;
      const int64_t vis_end = std::min(last, (other_len - base) / B);  // whole blocks: below
      auto visible = [&](int64_t i, int64_t j) {  // blocks i .. j - 1, unclipped
        return cover(base + i * B, base + j * B - 1) == expr::MaskCover::visible;
      };
      int64_t run_lo = 0, run_hi = 0;
      if (first < vis_end && visible(first, vis_end)) {
        run_lo = first;
        run_hi = vis_end;
      } else {
        const int64_t d0 = ((query ? r0 + shift : r0 - shift) - base) / B,
                      d1 = ((query ? r1 + shift : r1 - shift) - base) / B;
        for (const int64_t s : {vis_end - 1, d1, d0, first}) {
          if (s < first || s >= vis_end || (s >= run_lo && s < run_hi) || !visible(s, s + 1))
            continue;
          const int64_t right = 1 + proven_run(vis_end - s - 1, [&](int64_t a, int64_t b) {
                                  return visible(s + 1 + a, s + 1 + b);
                                });
          const int64_t left =
              proven_run(s - first, [&](int64_t a, int64_t b) { return visible(s - b, s - a); });
          if (left + right > run_hi - run_lo) {
            run_lo = s - left;
            run_hi = s + right;
          }
        }
      }
      if (run_lo < run_hi) {
        t.vis_lo = int32_t(base + run_lo * B);
        t.vis_hi = int32_t(base + run_hi * B);
      }
    }
    kept.push_back(t);
  }
  return kept;
}

}  // namespace driftless::layers::gpu::fast
