// The batch layout (engine/train/layout.h): which ModelInputs a rank holds under SDP, ring
// and a2a context parallelism, and that the ranks of a sequence together hold every query row
// of every micro-sequence exactly once.
#include <gtest/gtest.h>

#include <set>

#include "engine/train/layout.h"

namespace driftless::train {
namespace {

data::PackedSequence sequence(const std::vector<int32_t>& lengths) {
  data::PackedSequence s;
  s.document_lengths = lengths;
  for (int32_t l : lengths)
    for (int32_t j = 0; j < l; ++j) {
      s.tokens.push_back(j % 7);
      s.labels.push_back(j + 1 < l ? (j + 1) % 7 : -1);
    }
  return s;
}

TEST(Layout, RankInputsCoverEveryRowOnce) {
  const auto seq = sequence({5, 0, 11, 3, 13, 16});  // 48 tokens
  for (ContextParallel kind : {ContextParallel::none, ContextParallel::ring, ContextParallel::a2a})
    for (int32_t P : {1, 2, 3})
      for (int32_t m : {1, 2}) {
        if ((48 / m) % (kind == ContextParallel::ring ? 2 * P : P) != 0) continue;
        std::multiset<int64_t> rows;
        for (int32_t i = 0; i < m; ++i)
          for (int32_t r = 0; r < P; ++r) {
            const auto inputs = rank_inputs(seq, i, m, r, P, kind, 0);
            ASSERT_EQ(inputs.size(), kind == ContextParallel::ring ? 2u : 1u);
            for (const auto& in : inputs) {
              data::check_canonical(in);
              for (int64_t q = in.sequence_k_past; q < in.sequence_k_end; ++q) rows.insert(q);
            }
          }
        ASSERT_EQ(rows.size(), 48u);
        for (int64_t q = 0; q < 48; ++q) EXPECT_EQ(rows.count(q), 1u) << q;
      }
}

// The ring's load-balanced split: rank r of P holds chunks r and 2P-1-r of 2P.
TEST(Layout, RingHoldsChunksRAndTheirMirror) {
  const auto seq = sequence({48});
  const auto in = rank_inputs(seq, 1, 2, 0, 3, ContextParallel::ring, 0);  // L = 24, Lc = 4
  ASSERT_EQ(in.size(), 2u);
  EXPECT_EQ(in[0].sequence_k_past, 24);       // chunk 0 of micro-sequence 1
  EXPECT_EQ(in[1].sequence_k_past, 24 + 20);  // chunk 5
  EXPECT_EQ(in[1].first_document_begin, 0);   // the document began in micro-sequence 0
}

}  // namespace
}  // namespace driftless::train
